# The CUDA kernel families and the one owner of cuBLASLt (gemm.cu); only with FSDPD_CUDA.
if(FSDPD_CUDA)
  add_library(fsdpd_kernels_cuda STATIC
    cuda/adamw.cu
    cuda/attention.cu
    cuda/attention_tensor_core.cu
    cuda/cross_entropy.cu
    cuda/elementwise.cu
    cuda/embedding.cu
    cuda/gemm.cu
    cuda/rmsnorm.cu
    cuda/silu.cu)
  target_include_directories(fsdpd_kernels_cuda PUBLIC ${CMAKE_SOURCE_DIR})
  target_link_libraries(fsdpd_kernels_cuda PUBLIC CUDA::cudart CUDA::cublasLt absl::status
                        absl::statusor absl::strings PRIVATE spdlog::spdlog)
  # The kernels target Hopper (sm_90). CMake fills CMAKE_CUDA_ARCHITECTURES with the compiler's
  # default (sm_75 for CUDA 13) when none is given, which would leave the H100/H200 running
  # JIT-compiled PTX; an explicit choice on the command line is kept.
  set(fsdpd_cuda_architectures ${CMAKE_CUDA_ARCHITECTURES})
  if(fsdpd_cuda_architectures STREQUAL "" OR fsdpd_cuda_architectures MATCHES "^(52|75)$")
    set(fsdpd_cuda_architectures 90)
  endif()
  set_target_properties(fsdpd_kernels_cuda PROPERTIES POSITION_INDEPENDENT_CODE ON
                                                      CUDA_ARCHITECTURES "${fsdpd_cuda_architectures}")
  # Line info keeps profiles and sanitizer reports readable.
  target_compile_options(fsdpd_kernels_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo --expt-relaxed-constexpr>)
endif()
