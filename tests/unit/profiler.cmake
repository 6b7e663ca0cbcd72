# The worker's profiler: verdicts, op costs, the kernel table, the Chrome trace, profiling
# windows, and a profiled RunTrainer end to end.
foreach(profiler_test roofline op_cost kernel_table chrome_trace window device_attribution stream_wait)
  fsdpd_test(profiler_${profiler_test}_test LABEL unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/profiler_${profiler_test}_test.cc
    LIBS fsdpd_profiler nlohmann_json::nlohmann_json)
endforeach()
fsdpd_test(profiler_trainer_test LABEL unit TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/profiler_trainer_test.cc
  LIBS fsdpd_engine nlohmann_json::nlohmann_json)

# CUPTI activity records and range-profiler counters on a real GPU (skips without one).
if(FSDPD_CUDA AND TARGET fsdpd_kernels_cuda)
  fsdpd_test(profiler_cupti_test LABEL gpu
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/profiler_cupti_test.cc
    LIBS fsdpd_profiler fsdpd_kernels_cuda)
endif()
