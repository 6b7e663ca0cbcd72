# The coordinator's unit tests: pure logic and components with real SQLite in temp directories,
# plus one test that serves the gRPC services on a loopback port inside the test process.
fsdpd_test(server_scheduler_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_scheduler_test.cc LIBS fsdpd_server_lib)
fsdpd_test(server_scheduler_roots_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_scheduler_roots_test.cc LIBS fsdpd_server_lib)
fsdpd_test(server_store_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_store_test.cc LIBS fsdpd_server_lib)
fsdpd_test(server_rendezvous_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_rendezvous_test.cc LIBS fsdpd_server_lib)
fsdpd_test(server_job_manager_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_job_manager_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/server_job_manager_recovery_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/server_job_manager_logs_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/server_worker_claims_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/server_job_manager_scheduling_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/server_job_manager_exports_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/server_job_manager_origin_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/server_liveness_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/server_job_manager_pacing_test.cc
  LIBS fsdpd_server_lib fsdpd_test_support SQLite::SQLite3)
fsdpd_test(server_coordinator_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_coordinator_test.cc
  LIBS fsdpd_server_lib fsdpd_test_support)
fsdpd_test(server_report_pacer_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_report_pacer_test.cc LIBS fsdpd_server_lib)
fsdpd_test(server_config_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_config_test.cc LIBS fsdpd_server_lib)
fsdpd_test(server_cluster_identity_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_cluster_identity_test.cc LIBS fsdpd_server_lib)
fsdpd_test(server_worker_registry_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_worker_registry_test.cc LIBS fsdpd_server_lib)
fsdpd_test(server_worker_reclaim_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_worker_reclaim_test.cc LIBS fsdpd_server_lib)
fsdpd_test(server_api_replies_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_api_replies_test.cc LIBS fsdpd_server_lib)
fsdpd_test(server_file_stores_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_file_stores_test.cc LIBS fsdpd_server_lib)
# Gloo's real rendezvous against the coordinator's store, to check its bounds fit.
fsdpd_test(server_rendezvous_fit_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_rendezvous_fit_test.cc
  LIBS fsdpd_server_lib fsdpd_engine)
fsdpd_test(server_worker_health_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_worker_health_test.cc
  LIBS fsdpd_server_lib fsdpd_test_support SQLite::SQLite3)
