# Security of the coordinator in process: tokens, roles, TLS/mTLS, request and input limits.
fsdpd_test(security_server_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/security_server_test.cc
  LIBS fsdpd_server_lib fsdpd_test_support
  TIMEOUT 120)

# The worker's confinement of a job's data and init paths (--allowed-root).
if(TARGET fsdpd_worker_session)
  fsdpd_test(security_worker_paths_test LABEL unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/security_worker_paths_test.cc LIBS fsdpd_io)
endif()
