# The control-plane load generator: simulated workers against one real fsdpd (not a test; it
# prints the figures of bench/RESULTS.md's control-plane section).
if(TARGET fsdpd_proto AND TARGET fsdpd_spec AND TARGET fsdpd)
  add_executable(fsdpd_control_plane_load
    ${CMAKE_CURRENT_LIST_DIR}/control_plane_load.cc
    ${CMAKE_CURRENT_LIST_DIR}/control_plane_fleet.cc
    ${CMAKE_CURRENT_LIST_DIR}/control_plane_probe.cc)
  target_include_directories(fsdpd_control_plane_load PRIVATE ${CMAKE_SOURCE_DIR})
  target_link_libraries(fsdpd_control_plane_load PRIVATE
    fsdpd_proto fsdpd_spec gRPC::grpc++ absl::status absl::statusor absl::strings absl::synchronization
    SQLite::SQLite3 CLI11::CLI11 Threads::Threads)
  # The coordinator it starts unless --fsdpd names another binary (built separately, so a
  # coordinator change in progress does not block the load generator).
  target_compile_definitions(fsdpd_control_plane_load PRIVATE
    FSDPD_DEFAULT_BINARY="$<TARGET_FILE:fsdpd>")
endif()

# The gang bench: one large job's placement, rendezvous and first step (not a test; it prints
# the figures of bench/RESULTS.md). It runs the ranks' rendezvous through the worker's own
# store client and mesh exchange, compiled in here so that the bench needs no training engine.
if(TARGET fsdpd_proto AND TARGET fsdpd_spec AND TARGET fsdpd)
  add_executable(fsdpd_control_plane_gang
    ${CMAKE_CURRENT_LIST_DIR}/control_plane_gang.cc
    ${CMAKE_CURRENT_LIST_DIR}/control_plane_fleet.cc
    ${CMAKE_CURRENT_LIST_DIR}/control_plane_probe.cc
    ${CMAKE_SOURCE_DIR}/worker/comm/coordinator_key_value_store.cc
    ${CMAKE_SOURCE_DIR}/worker/comm/key_value_store.cc
    ${CMAKE_SOURCE_DIR}/worker/comm/mesh_exchange.cc)
  target_include_directories(fsdpd_control_plane_gang PRIVATE ${CMAKE_SOURCE_DIR})
  target_link_libraries(fsdpd_control_plane_gang PRIVATE
    fsdpd_proto fsdpd_spec gRPC::grpc++ absl::status absl::statusor absl::strings absl::synchronization
    SQLite::SQLite3 CLI11::CLI11 Threads::Threads)
  target_compile_definitions(fsdpd_control_plane_gang PRIVATE
    FSDPD_DEFAULT_BINARY="$<TARGET_FILE:fsdpd>")
endif()
