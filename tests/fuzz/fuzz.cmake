# libFuzzer targets for the readers of untrusted input, built by run_fuzzers.sh with clang++-14
# outside the main build (ASan + libFuzzer) and run for a bounded time each.
find_program(FSDPD_FUZZ_CLANG clang++-14)
if(FSDPD_FUZZ_CLANG)
  add_test(NAME fuzz_readers
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/run_fuzzers.sh ${CMAKE_BINARY_DIR}/fuzz)
  set_tests_properties(fuzz_readers PROPERTIES LABELS unit TIMEOUT 900
    ENVIRONMENT "FUZZ_SECONDS=20")
else()
  fsdpd_drop_tests(fuzz_readers "no clang++-14: Debian clang-14 and libclang-rt-14-dev")
endif()
