# Data loaders, safetensors, checkpoints and path confinement (library fsdpd_io).
fsdpd_test(io_data_loader_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/io_data_loader_test.cc LIBS fsdpd_io)
fsdpd_test(io_safetensors_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/io_safetensors_test.cc LIBS fsdpd_io)
fsdpd_test(io_checkpoint_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/io_checkpoint_test.cc LIBS fsdpd_io)
fsdpd_test(io_path_policy_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/io_path_policy_test.cc LIBS fsdpd_io)
fsdpd_test(io_blocking_steps_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/io_blocking_steps_test.cc LIBS fsdpd_io)
fsdpd_test(io_root_identity_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/io_root_identity_test.cc LIBS fsdpd_io fsdpd_test_support)
fsdpd_test(io_sharded_data_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/io_sharded_data_test.cc LIBS fsdpd_io)
