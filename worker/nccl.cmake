# Collectives over NCCL for the CUDA backend (worker/comm/nccl_communicator.*); only with
# FSDPD_CUDA. The engine uses it for `device: cuda` jobs.
if(FSDPD_CUDA AND TARGET fsdpd_cuda_backend)
  find_path(FSDPD_NCCL_INCLUDE_DIR nccl.h
    HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include /usr/include)
  find_library(FSDPD_NCCL_LIBRARY nccl
    HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu)
  if(NOT FSDPD_NCCL_INCLUDE_DIR OR NOT FSDPD_NCCL_LIBRARY)
    message(FATAL_ERROR "FSDPD_CUDA needs NCCL: nccl.h or libnccl not found "
                        "(looked in /usr/local/cuda and /usr/lib/x86_64-linux-gnu)")
  endif()
  add_library(fsdpd_nccl STATIC ${CMAKE_CURRENT_LIST_DIR}/comm/nccl_communicator.cc)
  target_include_directories(fsdpd_nccl PUBLIC ${CMAKE_SOURCE_DIR} ${FSDPD_NCCL_INCLUDE_DIR})
  target_link_libraries(fsdpd_nccl PUBLIC
    fsdpd_checked_communicator fsdpd_cuda_backend ${FSDPD_NCCL_LIBRARY} CUDA::cudart
    absl::status absl::statusor absl::strings spdlog::spdlog Threads::Threads)
  # The CUDA device runtime (CUDA backend, NCCL, CUPTI), which CreateDeviceRuntime picks for
  # --device cuda:N.
  if(TARGET fsdpd_engine)
    target_sources(fsdpd_engine PRIVATE
      ${CMAKE_CURRENT_LIST_DIR}/device/cuda_memory.cc
      ${CMAKE_CURRENT_LIST_DIR}/device/cuda_runtime.cc)
    target_link_libraries(fsdpd_engine PUBLIC fsdpd_nccl)
  endif()
endif()
