# Tests of the CUDA backend against the CPU reference; they skip themselves without a GPU.
if(FSDPD_CUDA AND TARGET fsdpd_cuda_backend)
  fsdpd_test(cuda_kernels_test LABEL gpu
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_pointwise_test.cc
            ${CMAKE_CURRENT_LIST_DIR}/cuda_matmul_test.cc
            ${CMAKE_CURRENT_LIST_DIR}/cuda_attention_test.cc
            ${CMAKE_CURRENT_LIST_DIR}/cuda_minillm_test.cc
            ${CMAKE_CURRENT_LIST_DIR}/cuda_optimizer_sms_test.cc
    LIBS fsdpd_cuda_backend fsdpd_model)
  fsdpd_test(cuda_backend_test LABEL gpu
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_backend_test.cc
    LIBS fsdpd_cuda_backend)
endif()
