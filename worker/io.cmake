# Data loaders, safetensors, sharded checkpoints and path confinement.
add_library(fsdpd_io STATIC
  ${CMAKE_CURRENT_LIST_DIR}/data/accumulation_loader.cc
  ${CMAKE_CURRENT_LIST_DIR}/data/data_loader.cc
  ${CMAKE_CURRENT_LIST_DIR}/data/path_policy.cc
  ${CMAKE_CURRENT_LIST_DIR}/data/sample_order.cc
  ${CMAKE_CURRENT_LIST_DIR}/data/sharded_data_loader.cc
  ${CMAKE_CURRENT_LIST_DIR}/data/synthetic_tokens.cc
  ${CMAKE_CURRENT_LIST_DIR}/data/token_shards.cc
  ${CMAKE_CURRENT_LIST_DIR}/data/window_data_loader.cc
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint/checkpoint.cc
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint/crc32c.cc
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint/rank_file.cc
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint/root_probe.cc)
target_link_libraries(fsdpd_io
  PUBLIC fsdpd_formats fsdpd_base fsdpd_spec absl::status absl::statusor absl::strings absl::str_format
  PRIVATE spdlog::spdlog nlohmann_json::nlohmann_json)
