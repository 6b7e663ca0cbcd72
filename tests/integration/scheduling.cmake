# Sharing the cluster through the real binaries: held jobs, backfill, priority caps and the
# worker memory ceiling. (The name sorts after integration.cmake, which defines the harness.)
if(TARGET fsdpd AND TARGET fsdpd-worker AND TARGET fsdpctl AND TARGET fsdpd_process_harness)
  fsdpd_test(fair_share_integration_test LABEL integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/fair_share_test.cc
    LIBS fsdpd_process_harness fsdpd_proto
    TIMEOUT 300)
  add_dependencies(fair_share_integration_test fsdpd fsdpd-worker fsdpctl)
endif()
