# Several hosts on one machine (tests/multihost/netns_hosts.py): each host a network namespace on
# one bridge, the coordinator in a namespace of its own, TLS and tokens on. The tests need root
# for `ip netns`; elsewhere they skip with the reason (exit 77), except under CI=true, where that
# is a failure.
if(TARGET fsdpd AND TARGET fsdpd-worker AND TARGET fsdpctl)
  find_program(FSDPD_PYTHON3 NAMES python3)
  if(NOT FSDPD_PYTHON3)
    set(FSDPD_PYTHON3 python3)  # the tests then fail with the shell's "not found"
  endif()
  foreach(test_name hosts_training hosts_faults hosts_checkpoint_roots)
    add_test(NAME multihost_${test_name}
             COMMAND ${FSDPD_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/${test_name}_test.py
                     ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
    set_tests_properties(multihost_${test_name} PROPERTIES LABELS "integration;multihost"
                         TIMEOUT 600 SKIP_RETURN_CODE 77)
  endforeach()
endif()
