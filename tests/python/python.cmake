# The Python client (python/): installed from the source tree into the build folder, then run
# against a real coordinator and two CPU workers on loopback.
if(TARGET fsdpd AND TARGET fsdpd-worker)
  find_program(FSDPD_PYTHON3 NAMES python3)
  if(NOT FSDPD_PYTHON3)
    set(FSDPD_PYTHON3 python3)  # the test then fails with the shell's "not found"
  endif()
  add_test(NAME python_client
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_python_client_test.sh ${FSDPD_PYTHON3}
                   ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
  set_tests_properties(python_client PROPERTIES LABELS integration TIMEOUT 300)
endif()
