# The collective contract (worker/comm/communicator.h), checked once in front of every
# communicator: the engine's (Gloo, local, host-staged) and NCCL's (nccl.cmake).
add_library(fsdpd_checked_communicator STATIC
  ${CMAKE_CURRENT_LIST_DIR}/comm/checked_communicator.cc)
target_include_directories(fsdpd_checked_communicator PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(fsdpd_checked_communicator PUBLIC
  fsdpd_model absl::status absl::statusor absl::strings)

# The training engine: collectives (Gloo), FSDP, the optimizer, the trainer loop and the device
# runtime (worker/device/; the CUDA one comes from nccl.cmake), plus the standalone `fsdpd-train`
# binary that runs one rank of a job from a spec file.
add_library(fsdpd_engine STATIC
  ${CMAKE_CURRENT_LIST_DIR}/comm/file_key_value_store.cc
  ${CMAKE_CURRENT_LIST_DIR}/comm/gloo_communicator.cc
  ${CMAKE_CURRENT_LIST_DIR}/comm/key_value_store.cc
  ${CMAKE_CURRENT_LIST_DIR}/comm/mesh_exchange.cc
  ${CMAKE_CURRENT_LIST_DIR}/comm/host_staged_communicator.cc
  ${CMAKE_CURRENT_LIST_DIR}/comm/local_communicator.cc
  ${CMAKE_CURRENT_LIST_DIR}/fsdp/flat_shard_layout.cc
  ${CMAKE_CURRENT_LIST_DIR}/fsdp/fsdp_state.cc
  ${CMAKE_CURRENT_LIST_DIR}/optim/lr_schedule.cc
  ${CMAKE_CURRENT_LIST_DIR}/optim/sharded_adamw.cc
  ${CMAKE_CURRENT_LIST_DIR}/device/cgroup_memory.cc
  ${CMAKE_CURRENT_LIST_DIR}/device/cpu_runtime.cc
  ${CMAKE_CURRENT_LIST_DIR}/device/oom_evidence.cc
  ${CMAKE_CURRENT_LIST_DIR}/device/device_runtime.cc
  ${CMAKE_CURRENT_LIST_DIR}/trainer.cc
  ${CMAKE_CURRENT_LIST_DIR}/trainer_checkpoint.cc
  ${CMAKE_CURRENT_LIST_DIR}/trainer_profiling.cc
  ${CMAKE_CURRENT_LIST_DIR}/step_batch.cc
  ${CMAKE_CURRENT_LIST_DIR}/trainer_step.cc
  ${CMAKE_CURRENT_LIST_DIR}/trainer_support.cc
  ${CMAKE_CURRENT_LIST_DIR}/trainer_weights.cc
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint/consolidate.cc)
target_include_directories(fsdpd_engine PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(fsdpd_engine PUBLIC
  fsdpd_checked_communicator fsdpd_model fsdpd_io fsdpd_profiler fsdpd_spec fsdpd_proto gloo
  absl::status absl::statusor absl::strings spdlog::spdlog Threads::Threads)

add_executable(fsdpd-train ${CMAKE_CURRENT_LIST_DIR}/train_main.cc)
target_link_libraries(fsdpd-train PRIVATE fsdpd_engine CLI11::CLI11 nlohmann_json::nlohmann_json)
