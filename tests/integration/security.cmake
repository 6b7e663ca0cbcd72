# Security through the real fsdpd, fsdpd-worker and fsdpctl binaries (TLS, mTLS, tokens).
if(TARGET fsdpd AND TARGET fsdpd-worker AND TARGET fsdpctl AND TARGET fsdpd_process_harness)
  fsdpd_test(security_process_test LABEL integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/security_process_test.cc
    LIBS fsdpd_process_harness
    TIMEOUT 180)
  add_dependencies(security_process_test fsdpd fsdpd-worker fsdpctl)
  # The attacker's side: the generated stubs, called with and without credentials.
  fsdpd_test(rogue_client_test LABEL integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/rogue_client_test.cc
    LIBS fsdpd_process_harness fsdpd_proto
    TIMEOUT 240)
  add_dependencies(rogue_client_test fsdpd fsdpd-worker fsdpctl)
  # One coordinator per state folder, the state folder's files, fsdpctl's output targets.
  fsdpd_test(state_trust_test LABEL integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/state_trust_test.cc
    LIBS fsdpd_process_harness fsdpd_proto
    TIMEOUT 240)
  add_dependencies(state_trust_test fsdpd fsdpd-worker fsdpctl)
  # A worker credential forging claims, log lines, rendezvous keys and a second Session.
  fsdpd_test(forged_worker_test LABEL integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/forged_worker_test.cc
    LIBS fsdpd_process_harness fsdpd_proto
    TIMEOUT 240)
  add_dependencies(forged_worker_test fsdpd fsdpd-worker fsdpctl)
endif()
