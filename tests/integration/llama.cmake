# A llama job through the real binaries on loopback, from fsdpctl and the Python client
# (llama_job_test.py); the installed package comes from tests/python's python_package fixture.
if(TARGET fsdpd AND TARGET fsdpd-worker AND TARGET fsdpctl)
  find_program(FSDPD_PYTHON3 NAMES python3)
  if(NOT FSDPD_PYTHON3)
    set(FSDPD_PYTHON3 python3)  # the test then fails with the shell's "not found"
  endif()
  add_test(NAME llama_job
           COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${CMAKE_BINARY_DIR}/python-client
                   ${FSDPD_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/llama_job_test.py
                   ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(llama_job PROPERTIES LABELS integration TIMEOUT 300
                                            FIXTURES_REQUIRED fsdpd_python_package)
endif()
# A job with parallel.matmul_dtype fp8 on CPU workers, through the same binaries (fp8_job_test.py).
if(TARGET fsdpd AND TARGET fsdpd-worker AND TARGET fsdpctl)
  add_test(NAME fp8_job
           COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${CMAKE_BINARY_DIR}/python-client
                   ${FSDPD_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/fp8_job_test.py
                   ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(fp8_job PROPERTIES LABELS integration TIMEOUT 300
                                          FIXTURES_REQUIRED fsdpd_python_package)
endif()
