# The metrics exporter's per-job series and their retention after a job finishes.
fsdpd_test(server_metrics_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_metrics_test.cc
  LIBS fsdpd_server_lib fsdpd_test_support)
