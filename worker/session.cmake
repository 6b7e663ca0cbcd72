# fsdpd-worker: the session with the coordinator around the training engine (engine.cmake).
add_library(fsdpd_worker_session STATIC
  ${CMAKE_CURRENT_LIST_DIR}/comm/coordinator_key_value_store.cc
  ${CMAKE_CURRENT_LIST_DIR}/session_device.cc
  ${CMAKE_CURRENT_LIST_DIR}/session_outbox.cc
  ${CMAKE_CURRENT_LIST_DIR}/session_job.cc
  ${CMAKE_CURRENT_LIST_DIR}/session_export.cc
  ${CMAKE_CURRENT_LIST_DIR}/session.cc
  ${CMAKE_CURRENT_LIST_DIR}/session_health.cc
  ${CMAKE_CURRENT_LIST_DIR}/session_stream.cc
)
target_link_libraries(fsdpd_worker_session PUBLIC
  fsdpd_proto fsdpd_bearer_token absl::status absl::statusor absl::strings spdlog::spdlog
  Threads::Threads)

# The engine library comes from engine.cmake; until it exists only the session library builds.
if(TARGET fsdpd_engine)
  target_link_libraries(fsdpd_worker_session PUBLIC fsdpd_engine)
  add_executable(fsdpd-worker ${CMAKE_CURRENT_LIST_DIR}/main.cc)
  target_link_libraries(fsdpd-worker PRIVATE fsdpd_worker_session CLI11::CLI11 absl::synchronization)
endif()
