# Python tests through the real binaries on loopback: README's tour as README writes it, and
# fsdpctl's and fsdpd's messages (tests/integration/local_cluster.py starts the processes).
if(TARGET fsdpd AND TARGET fsdpd-worker AND TARGET fsdpctl)
  find_program(FSDPD_PYTHON3 NAMES python3)
  if(NOT FSDPD_PYTHON3)
    set(FSDPD_PYTHON3 python3)  # the tests then fail with the shell's "not found"
  endif()
  add_test(NAME readme_tour
           COMMAND ${FSDPD_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/readme_tour_test.py
                   ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  add_test(NAME cli_messages
           COMMAND ${FSDPD_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/cli_messages_test.py
                   ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  add_test(NAME manage_jobs
           COMMAND ${FSDPD_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/manage_jobs_test.py
                   ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(readme_tour cli_messages manage_jobs PROPERTIES LABELS integration
                       TIMEOUT 600)
endif()
