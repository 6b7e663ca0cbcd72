# Fault-tolerance integration tests: workers killed mid-job, checkpoints that cannot be written
# or are corrupted, and jobs that exhaust max_restarts, on real processes over loopback.
if(TARGET fsdpd AND TARGET fsdpd-worker AND TARGET fsdpctl AND TARGET fsdpd_process_harness)
  fsdpd_test(fault_tolerance_integration_test LABEL integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/fault_tolerance_test.cc
    LIBS fsdpd_process_harness fsdpd_io
    TIMEOUT 180)
  add_dependencies(fault_tolerance_integration_test fsdpd fsdpd-worker fsdpctl)
endif()
