# The Python client (python/): python_package installs it from the source tree into the build
# folder (a fixture, so the tests below never install at the same time); python_client runs it
# against a real coordinator and two CPU workers on loopback; python_mypy type-checks it and
# python/examples with mypy --strict.
if(TARGET fsdpd AND TARGET fsdpd-worker)
  find_program(FSDPD_PYTHON3 NAMES python3)
  if(NOT FSDPD_PYTHON3)
    set(FSDPD_PYTHON3 python3)  # the tests then fail with the shell's "not found"
  endif()
  set(python_args ${FSDPD_PYTHON3} ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
  add_test(NAME python_package
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/install_python_package.sh ${python_args})
  set_tests_properties(python_package PROPERTIES LABELS integration TIMEOUT 120
                                                 FIXTURES_SETUP fsdpd_python_package)
  add_test(NAME python_client
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_python_client_test.sh ${python_args})
  set_tests_properties(python_client PROPERTIES LABELS integration TIMEOUT 300
                                                FIXTURES_REQUIRED fsdpd_python_package)
  # fsdpd.data.write_shards on its own (the sharded job through the daemon is in python_client).
  add_test(NAME python_data_shards
           COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${CMAKE_BINARY_DIR}/python-client
                   ${FSDPD_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/data_shards_test.py)
  set_tests_properties(python_data_shards PROPERTIES LABELS integration TIMEOUT 60
                                                     FIXTURES_REQUIRED fsdpd_python_package)
  # mypy and the stubs it reads (scripts/install_deps.sh installs them).
  set(mypy_packages mypy types-protobuf types-grpcio types-PyYAML)
  list(JOIN mypy_packages "', '" mypy_list)
  execute_process(
    COMMAND ${FSDPD_PYTHON3} -c
            "import importlib.metadata as m; [m.version(p) for p in ['${mypy_list}']]"
    RESULT_VARIABLE no_mypy OUTPUT_QUIET ERROR_QUIET)
  if(no_mypy)
    list(JOIN mypy_packages ", " mypy_line)
    fsdpd_drop_tests(python_mypy "no mypy: pip ${mypy_line}")
  else()
    add_test(NAME python_mypy
             COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_python_mypy.sh ${python_args})
    set_tests_properties(python_mypy PROPERTIES LABELS integration TIMEOUT 300
                                                FIXTURES_REQUIRED fsdpd_python_package)
  endif()
endif()
