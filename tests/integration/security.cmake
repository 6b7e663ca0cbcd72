# Security through the real fsdpd, fsdpd-worker and fsdpctl binaries (TLS, mTLS, tokens).
if(TARGET fsdpd AND TARGET fsdpd-worker AND TARGET fsdpctl AND TARGET fsdpd_process_harness)
  fsdpd_test(security_process_test LABEL integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/security_process_test.cc
    LIBS fsdpd_process_harness
    TIMEOUT 180)
  add_dependencies(security_process_test fsdpd fsdpd-worker fsdpctl)
endif()
