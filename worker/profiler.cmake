# The worker's profiler: ops, copies and collectives timed in profiling windows, the kernel
# table with roofline verdicts, and the Chrome trace (worker/profiler/).
add_library(fsdpd_profiler STATIC
  ${CMAKE_CURRENT_LIST_DIR}/profiler/chrome_trace.cc
  ${CMAKE_CURRENT_LIST_DIR}/profiler/device_profiler.cc
  ${CMAKE_CURRENT_LIST_DIR}/profiler/kernel_table.cc
  ${CMAKE_CURRENT_LIST_DIR}/profiler/op_cost.cc
  ${CMAKE_CURRENT_LIST_DIR}/profiler/profile_recorder.cc
  ${CMAKE_CURRENT_LIST_DIR}/profiler/profile_window.cc
  ${CMAKE_CURRENT_LIST_DIR}/profiler/profiling_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/profiler/profiling_communicator.cc
  ${CMAKE_CURRENT_LIST_DIR}/profiler/profiling_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/profiler/roofline.cc)
target_include_directories(fsdpd_profiler PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(fsdpd_profiler
  PUBLIC fsdpd_model fsdpd_proto absl::status absl::statusor absl::strings
  PRIVATE nlohmann_json::nlohmann_json spdlog::spdlog)

# Device timings (CUPTI Activity API) and speed-of-light counters (CUPTI Range Profiler).
if(FSDPD_CUDA)
  target_sources(fsdpd_profiler PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/profiler/cuda_device_profiler.cc
    ${CMAKE_CURRENT_LIST_DIR}/profiler/cuda_stream_wait_timer.cc
    ${CMAKE_CURRENT_LIST_DIR}/profiler/cupti_activity.cc
    ${CMAKE_CURRENT_LIST_DIR}/profiler/cupti_range_profiler.cc)
  target_link_libraries(fsdpd_profiler PUBLIC CUDA::cupti CUDA::cudart)
  # The stream-wait timer reads the CUDA backend's streams.
  if(TARGET fsdpd_cuda_backend)
    target_link_libraries(fsdpd_profiler PUBLIC fsdpd_cuda_backend)
  endif()
endif()
