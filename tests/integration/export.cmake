# The exported model's tensors against PyTorch's state_dict names and shapes (tests/golden/tiny).
fsdpd_test(engine_export_names_test LABEL integration TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_export_names_test.cc
  LIBS fsdpd_engine fsdpd_test_support)
# A checkpoint consolidated into whole tensors against the trainer's own export, and a job
# started from another job's checkpoint at another world size.
fsdpd_test(engine_checkpoint_consolidation_test LABEL integration TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_checkpoint_consolidation_test.cc
  LIBS fsdpd_engine)
