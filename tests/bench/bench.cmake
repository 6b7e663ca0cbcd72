# The benchmark tools' own logic, on inputs built by hand (the benchmarks run on the GPU machine).
add_test(NAME bench_trace_gaps COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/trace_gaps_test.py)
set_tests_properties(bench_trace_gaps PROPERTIES LABELS unit TIMEOUT 60
  ENVIRONMENT "FSDPD_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
