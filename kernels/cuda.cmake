# The CUDA kernel families and the owners of cuBLASLt (gemm.cu, and fp8_gemm.cc for the FP8
# products); only with FSDPD_CUDA.
if(FSDPD_CUDA)
  add_library(fsdpd_kernels_cuda STATIC
    cuda/adamw.cu
    cuda/attention.cu
    cuda/attention_cudnn.cc
    cuda/attention_tensor_core.cu
    cuda/column_sum.cu
    cuda/cross_entropy.cu
    cuda/elementwise.cu
    cuda/embedding.cu
    cuda/fp8.cu
    cuda/fp8_gemm.cc
    cuda/fp8_linear.cc
    cuda/gemm.cu
    cuda/rmsnorm.cu
    cuda/rotary.cu
    cuda/silu.cu
    cuda/swiglu.cu)
  target_include_directories(fsdpd_kernels_cuda PUBLIC ${CMAKE_SOURCE_DIR})
  target_link_libraries(fsdpd_kernels_cuda PUBLIC fsdpd_base CUDA::cudart CUDA::cublasLt absl::status
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
  # cuDNN's fused attention through its header-only C++ frontend (scripts/install_deps.sh puts
  # the frontend's headers in /opt/cudnn-frontend/include). Without both, the own attention
  # kernels serve every shape; -DFSDPD_CUDNN=OFF leaves cuDNN out on purpose.
  find_path(FSDPD_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(FSDPD_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
  find_path(FSDPD_CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h
            HINTS $ENV{CUDNN_FRONTEND_INCLUDE} /opt/cudnn-frontend/include)
  if(FSDPD_CUDNN_INCLUDE_DIR AND FSDPD_CUDNN_LIBRARY AND FSDPD_CUDNN_FRONTEND_INCLUDE_DIR)
    set(FSDPD_CUDNN_DEFAULT ON)
  else()
    set(FSDPD_CUDNN_DEFAULT OFF)
  endif()
  option(FSDPD_CUDNN "Use cuDNN's fused attention (needs cuDNN 9 and its C++ frontend)"
         ${FSDPD_CUDNN_DEFAULT})
  if(FSDPD_CUDNN)
    message(STATUS "fsdpd: cuDNN attention on (${FSDPD_CUDNN_LIBRARY})")
    target_include_directories(fsdpd_kernels_cuda SYSTEM PRIVATE ${FSDPD_CUDNN_INCLUDE_DIR}
                               ${FSDPD_CUDNN_FRONTEND_INCLUDE_DIR})
    target_compile_definitions(fsdpd_kernels_cuda PRIVATE FSDPD_HAS_CUDNN=1
                               CUDNN_FRONTEND_SKIP_JSON_LIB=1)
    # The frontend carries a runtime-compiled engine for newer GPUs, hence NVRTC.
    target_link_libraries(fsdpd_kernels_cuda PUBLIC ${FSDPD_CUDNN_LIBRARY} CUDA::nvrtc)
  else()
    message(STATUS "fsdpd: cuDNN attention off; the own attention kernels run")
  endif()
  # Line info keeps profiles and sanitizer reports readable.
  target_compile_options(fsdpd_kernels_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo --expt-relaxed-constexpr>)
endif()
