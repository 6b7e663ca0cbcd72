# The CUDA kernel families and the one owner of cuBLASLt (gemm.cu); only with FSDPD_CUDA.
if(FSDPD_CUDA)
  add_library(fsdpd_kernels_cuda STATIC
    cuda/adamw.cu
    cuda/attention.cu
    cuda/cross_entropy.cu
    cuda/elementwise.cu
    cuda/embedding.cu
    cuda/gemm.cu
    cuda/rmsnorm.cu
    cuda/silu.cu)
  target_include_directories(fsdpd_kernels_cuda PUBLIC ${CMAKE_SOURCE_DIR})
  target_link_libraries(fsdpd_kernels_cuda PUBLIC CUDA::cudart CUDA::cublasLt absl::status
                        absl::statusor absl::strings PRIVATE spdlog::spdlog)
  set_target_properties(fsdpd_kernels_cuda PROPERTIES POSITION_INDEPENDENT_CODE ON
                                                      CUDA_SEPARABLE_COMPILATION OFF)
  # Line info keeps profiles and sanitizer reports readable.
  target_compile_options(fsdpd_kernels_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo --expt-relaxed-constexpr>)
endif()
