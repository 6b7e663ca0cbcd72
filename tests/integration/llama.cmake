# Jobs through the real binaries on loopback, from fsdpctl and the Python client: a llama job
# (llama_job_test.py) and one with parallel.matmul_dtype fp8 (fp8_job_test.py). The installed
# package comes from tests/python's python_package fixture.
if(TARGET fsdpd AND TARGET fsdpd-worker AND TARGET fsdpctl)
  find_program(FSDPD_PYTHON3 NAMES python3)
  if(NOT FSDPD_PYTHON3)
    set(FSDPD_PYTHON3 python3)  # the test then fails with the shell's "not found"
  endif()
  foreach(job llama fp8)
    add_test(NAME ${job}_job
             COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${CMAKE_BINARY_DIR}/python-client
                     ${FSDPD_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/${job}_job_test.py
                     ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
    set_tests_properties(${job}_job PROPERTIES LABELS integration TIMEOUT 300
                                               FIXTURES_REQUIRED fsdpd_python_package)
  endforeach()
endif()
