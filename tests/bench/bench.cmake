# The benchmark tools' own logic, on inputs built by hand (the benchmarks run on the GPU machine).
add_test(NAME bench_trace_gaps COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/trace_gaps_test.py)
set_tests_properties(bench_trace_gaps PROPERTIES LABELS unit TIMEOUT 60
  ENVIRONMENT "FSDPD_SOURCE_DIR=${CMAKE_SOURCE_DIR}")

# bench/llama_cpp/export_to_gguf.py (fsdpd export -> GGUF for llama.cpp) on tiny exports, read
# back with the gguf package (scripts/install_deps.sh); llama.cpp itself is not needed.
add_test(NAME bench_export_to_gguf COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/export_to_gguf_test.py)
set_tests_properties(bench_export_to_gguf PROPERTIES LABELS unit TIMEOUT 120
  ENVIRONMENT "FSDPD_SOURCE_DIR=${CMAKE_SOURCE_DIR}")

# bench/fp8_curves.py (the FP8 loss curves' verdict at each checkpoint, the control, the CSV and
# the picture) on runs built by hand.
add_test(NAME bench_fp8_curves COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/fp8_curves_test.py)
set_tests_properties(bench_fp8_curves PROPERTIES LABELS unit TIMEOUT 60
  ENVIRONMENT "FSDPD_SOURCE_DIR=${CMAKE_SOURCE_DIR}")

# bench/capacity_table.py (the capacity boundaries, undecided trials and ratios) on trials built
# by hand.
add_test(NAME bench_capacity_table COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/capacity_table_test.py)
set_tests_properties(bench_capacity_table PROPERTIES LABELS unit TIMEOUT 60
  ENVIRONMENT "FSDPD_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
