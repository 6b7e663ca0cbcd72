# Integration tests: real fsdpd, fsdpd-worker and fsdpctl processes on loopback. They need all
# three binaries, so they are defined only once every area provides its target.
if(TARGET fsdpd AND TARGET fsdpd-worker AND TARGET fsdpctl)
  add_library(fsdpd_process_harness STATIC ${CMAKE_CURRENT_LIST_DIR}/process_harness.cc)
  target_link_libraries(fsdpd_process_harness PUBLIC
    nlohmann_json::nlohmann_json GTest::gtest Threads::Threads)

  foreach(test_name job_lifecycle coordinator_restart spec_rejection worker_flags paced_reports)
    fsdpd_test(${test_name}_integration_test LABEL integration
      SOURCES ${CMAKE_CURRENT_LIST_DIR}/${test_name}_test.cc
      LIBS fsdpd_process_harness
      TIMEOUT 180)
    # The tests run the binaries, so building a test builds them too.
    add_dependencies(${test_name}_integration_test fsdpd fsdpd-worker fsdpctl)
  endforeach()
  # Counts the CUDA devices, to know what --device cuda:0 must do on this host.
  if(FSDPD_CUDA)
    target_link_libraries(worker_flags_integration_test PRIVATE CUDA::cudart)
  endif()
  # Reads the stored per-rank reports straight from the coordinator's database.
  target_link_libraries(coordinator_restart_integration_test PRIVATE SQLite::SQLite3)

  # The worker's outbox on its own, in process: a unit test kept beside the session's other tests.
  fsdpd_test(worker_outbox_test LABEL unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/worker_outbox_test.cc
    LIBS fsdpd_worker_session)
endif()
