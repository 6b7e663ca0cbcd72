# Tests of the CUDA backend against the CPU reference; they skip themselves without a GPU.
if(FSDPD_CUDA AND TARGET fsdpd_cuda_backend)
  fsdpd_test(cuda_kernels_test LABEL gpu
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_pointwise_test.cc
            ${CMAKE_CURRENT_LIST_DIR}/cuda_matmul_test.cc
            ${CMAKE_CURRENT_LIST_DIR}/cuda_fp8_test.cc
            ${CMAKE_CURRENT_LIST_DIR}/cuda_fp8_linear_test.cc
            ${CMAKE_CURRENT_LIST_DIR}/cuda_amax_test.cc
            ${CMAKE_CURRENT_LIST_DIR}/cuda_attention_test.cc
            ${CMAKE_CURRENT_LIST_DIR}/cuda_gqa_attention_test.cc
            ${CMAKE_CURRENT_LIST_DIR}/cuda_llama_ops_test.cc
            ${CMAKE_CURRENT_LIST_DIR}/cuda_minillm_test.cc
            ${CMAKE_CURRENT_LIST_DIR}/cuda_optimizer_sms_test.cc
    LIBS fsdpd_cuda_backend fsdpd_model CUDA::cupti)
  fsdpd_test(cuda_backend_test LABEL gpu
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_backend_test.cc
    LIBS fsdpd_cuda_backend)
endif()
# Without CUDA no test labelled gpu is built (here, tests/gpu/*.cmake and profiler_cupti_test in
# tests/unit/profiler.cmake), so `ctest -L gpu` finds none. scripts/install_deps.sh does not
# install the CUDA toolkit.
if(NOT FSDPD_CUDA)
  if(CMAKE_CUDA_COMPILER)
    fsdpd_drop_tests("every test labelled gpu" "-DFSDPD_CUDA=OFF")
  else()
    fsdpd_drop_tests("every test labelled gpu" "no CUDA compiler: nvcc not found")
  endif()
endif()
