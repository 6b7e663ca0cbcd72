# Checkpoints listed, exported from any job whatever its state, and a job started from another
# job's checkpoint, through the real binaries on loopback (checkpoint_export_test.py).
if(TARGET fsdpd AND TARGET fsdpd-worker AND TARGET fsdpctl)
  find_program(FSDPD_PYTHON3 NAMES python3)
  if(NOT FSDPD_PYTHON3)
    set(FSDPD_PYTHON3 python3)  # the test then fails with the shell's "not found"
  endif()
  add_test(NAME checkpoint_export
           COMMAND ${FSDPD_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/checkpoint_export_test.py
                   ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(checkpoint_export PROPERTIES LABELS integration TIMEOUT 600)
endif()
