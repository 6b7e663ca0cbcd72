# The device runtime's choice from --device: what it picks, and its errors, which depend on
# whether the build has the CUDA backend (FSDPD_TEST_CUDA_BUILD tells the test).
fsdpd_test(engine_device_runtime_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_device_runtime_test.cc LIBS fsdpd_engine)
if(FSDPD_CUDA)
  target_compile_definitions(engine_device_runtime_test PRIVATE FSDPD_TEST_CUDA_BUILD=1)
else()
  target_compile_definitions(engine_device_runtime_test PRIVATE FSDPD_TEST_CUDA_BUILD=0)
endif()
# The memory a worker may use (its cgroup's limit) and the OOM-kill record of a restarted worker,
# on fake cgroup trees.
fsdpd_test(engine_cgroup_memory_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_cgroup_memory_test.cc LIBS fsdpd_engine)
