# A profiling window on the CUDA engine end to end (CUPTI activity and counters); skips itself
# without a GPU.
if(FSDPD_CUDA AND TARGET fsdpd_nccl AND TARGET fsdpd_engine)
  fsdpd_test(profiler_cuda_trainer_test LABEL gpu TIMEOUT 600
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/profiler_cuda_trainer_test.cc
    LIBS fsdpd_engine fsdpd_nccl nlohmann_json::nlohmann_json)
endif()
