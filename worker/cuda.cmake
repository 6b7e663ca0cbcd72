# The CUDA backend (caching allocator, streams, events, ops over kernels/cuda); only with
# FSDPD_CUDA. The engine picks it for --device cuda:N.
if(FSDPD_CUDA)
  add_library(fsdpd_cuda_backend STATIC
    ${CMAKE_CURRENT_LIST_DIR}/backend/cuda_allocator.cc
    ${CMAKE_CURRENT_LIST_DIR}/backend/cuda_backend.cc
    ${CMAKE_CURRENT_LIST_DIR}/backend/cuda_ops.cc)
  target_include_directories(fsdpd_cuda_backend PUBLIC ${CMAKE_SOURCE_DIR})
  target_link_libraries(fsdpd_cuda_backend PUBLIC
    fsdpd_kernels_cuda fsdpd_model CUDA::cudart CUDA::cublasLt
    absl::status absl::statusor absl::strings spdlog::spdlog Threads::Threads)
endif()
