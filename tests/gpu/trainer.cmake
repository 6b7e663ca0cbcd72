# The CUDA engine end to end against the CPU engine and PyTorch, and the NCCL communicator; they
# skip themselves without a GPU.
if(FSDPD_CUDA AND TARGET fsdpd_nccl AND TARGET fsdpd_engine)
  fsdpd_test(cuda_trainer_test LABEL gpu TIMEOUT 300
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_trainer_test.cc
    LIBS fsdpd_engine fsdpd_nccl fsdpd_test_support)
  # The Llama model (rotary, grouped-query attention, SwiGLU, tied or not) likewise.
  fsdpd_test(cuda_llama_trainer_test LABEL gpu TIMEOUT 300
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_llama_trainer_test.cc
    LIBS fsdpd_engine fsdpd_nccl fsdpd_test_support)
  # K micro-batches against one batch K times larger (train.grad_accum_steps).
  fsdpd_test(cuda_grad_accum_test LABEL gpu TIMEOUT 300
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_grad_accum_test.cc
    LIBS fsdpd_engine fsdpd_nccl fsdpd_test_support)
  # 2 and 4 CUDA ranks on one GPU against the CPU engine at the same world size.
  fsdpd_test(cuda_multirank_test LABEL gpu TIMEOUT 600
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_multirank_test.cc
    LIBS fsdpd_engine fsdpd_nccl fsdpd_test_support)
endif()
