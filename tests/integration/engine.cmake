# The engine end to end: fsdpd-train ranks on loopback, RunTrainer in process, and the PyTorch
# trajectory of tests/golden/tiny.
fsdpd_test(engine_multiprocess_test LABEL integration TIMEOUT 600
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_multiprocess_test.cc
  LIBS fsdpd_engine nlohmann_json::nlohmann_json)
target_compile_definitions(engine_multiprocess_test PRIVATE
  FSDPD_TRAIN_BINARY="$<TARGET_FILE:fsdpd-train>")
add_dependencies(engine_multiprocess_test fsdpd-train)
fsdpd_test(engine_golden_trajectory_test LABEL integration TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_golden_trajectory_test.cc
  LIBS fsdpd_engine fsdpd_test_support)
fsdpd_test(engine_trainer_test LABEL integration TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_trainer_test.cc LIBS fsdpd_engine)
fsdpd_test(engine_validation_test LABEL integration TIMEOUT 180
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_validation_test.cc LIBS fsdpd_engine)
fsdpd_test(engine_grad_accum_test LABEL integration TIMEOUT 180
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_grad_accum_test.cc LIBS fsdpd_engine)
# Llama through the engine against transformers (tests/golden/llama_tiny*), at one and two ranks.
fsdpd_test(engine_llama_golden_test LABEL integration TIMEOUT 180
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_llama_golden_test.cc
  LIBS fsdpd_engine fsdpd_test_support)
