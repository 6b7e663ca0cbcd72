# Fault-tolerance integration tests: workers killed mid-job, checkpoints that cannot be written
# or are corrupted, and jobs that exhaust max_restarts, on real processes over loopback. The
# harness source is compiled in directly: integration.cmake, which defines its library, is
# included after this file.
if(TARGET fsdpd AND TARGET fsdpd-worker AND TARGET fsdpctl)
  fsdpd_test(fault_tolerance_integration_test LABEL integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/fault_tolerance_test.cc
            ${CMAKE_CURRENT_LIST_DIR}/process_harness.cc
    LIBS fsdpd_io nlohmann_json::nlohmann_json Threads::Threads
    TIMEOUT 240)
  add_dependencies(fault_tolerance_integration_test fsdpd fsdpd-worker fsdpctl)
endif()

# Workers wedged by a job (a FIFO, a read that never returns) and workers that cannot write their
# checkpoint root.
if(TARGET fsdpd AND TARGET fsdpd-worker AND TARGET fsdpctl)
  fsdpd_test(wedged_worker_integration_test LABEL integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/wedged_worker_test.cc
            ${CMAKE_CURRENT_LIST_DIR}/process_harness.cc
    LIBS nlohmann_json::nlohmann_json Threads::Threads
    TIMEOUT 400)
  add_dependencies(wedged_worker_integration_test fsdpd fsdpd-worker fsdpctl)
endif()

# A sharded dataset's job killed mid-epoch resumes on the uninterrupted token stream.
if(TARGET fsdpd AND TARGET fsdpd-worker AND TARGET fsdpctl)
  fsdpd_test(sharded_resume_integration_test LABEL integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/sharded_resume_test.cc
            ${CMAKE_CURRENT_LIST_DIR}/process_harness.cc
    LIBS fsdpd_io nlohmann_json::nlohmann_json Threads::Threads
    TIMEOUT 240)
  add_dependencies(sharded_resume_integration_test fsdpd fsdpd-worker fsdpctl)
endif()
