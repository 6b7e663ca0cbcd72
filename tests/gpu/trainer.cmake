# The CUDA engine end to end against the CPU engine and PyTorch, and the NCCL communicator; they
# skip themselves without a GPU.
if(FSDPD_CUDA AND TARGET fsdpd_nccl AND TARGET fsdpd_engine)
  fsdpd_test(cuda_trainer_test LABEL gpu TIMEOUT 300
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_trainer_test.cc
    LIBS fsdpd_engine fsdpd_nccl nlohmann_json::nlohmann_json)
  target_compile_definitions(cuda_trainer_test PRIVATE
    FSDPD_DEFAULT_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  # 2 and 4 CUDA ranks on one GPU against the CPU engine at the same world size.
  fsdpd_test(cuda_multirank_test LABEL gpu TIMEOUT 600
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_multirank_test.cc
    LIBS fsdpd_engine fsdpd_nccl nlohmann_json::nlohmann_json)
  target_compile_definitions(cuda_multirank_test PRIVATE
    FSDPD_DEFAULT_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
endif()
