# Several hosts on one machine (tests/multihost/netns_hosts.py): each host a network namespace on
# one bridge, the coordinator in a namespace of its own, TLS and tokens on. The tests need root
# for `ip netns`; elsewhere they skip with the reason (exit 77), except under CI=true, where that
# is a failure. Each fault of hosts_faults_test.py is a test of its own.
if(TARGET fsdpd AND TARGET fsdpd-worker AND TARGET fsdpctl)
  find_program(FSDPD_PYTHON3 NAMES python3)
  if(NOT FSDPD_PYTHON3)
    set(FSDPD_PYTHON3 python3)  # the tests then fail with the shell's "not found"
  endif()
  set(multihost_dir ${CMAKE_CURRENT_LIST_DIR})
  add_test(NAME multihost_training
           COMMAND ${FSDPD_PYTHON3} ${multihost_dir}/hosts_training_test.py
                   ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  add_test(NAME multihost_checkpoint_roots
           COMMAND ${FSDPD_PYTHON3} ${multihost_dir}/hosts_checkpoint_roots_test.py
                   ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set(multihost_tests multihost_training multihost_checkpoint_roots)
  foreach(fault long_partition short_partition coordinator_partition host_dies)
    add_test(NAME multihost_${fault}
             COMMAND ${FSDPD_PYTHON3} ${multihost_dir}/hosts_faults_test.py
                     ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR} ${fault})
    list(APPEND multihost_tests multihost_${fault})
  endforeach()
  # The tests end themselves (and clean up) before ctest's timeout would kill them.
  set_tests_properties(${multihost_tests} PROPERTIES LABELS "integration;multihost" TIMEOUT 600
                       SKIP_RETURN_CODE 77)
endif()
