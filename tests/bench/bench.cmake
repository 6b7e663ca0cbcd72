# The benchmark tools' own logic, on inputs built by hand (the benchmarks run on the GPU machine):
# each a Python unittest file beside this one, labelled unit, reading the scripts from the source
# tree (FSDPD_SOURCE_DIR).
function(fsdpd_bench_script_test name file timeout)
  add_test(NAME ${name} COMMAND python3 ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/${file})
  set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT ${timeout}
    ENVIRONMENT "FSDPD_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endfunction()

fsdpd_bench_script_test(bench_trace_gaps trace_gaps_test.py 60)
# bench/llama_cpp/export_to_gguf.py (fsdpd export -> GGUF for llama.cpp) on tiny exports, read
# back with the gguf package (scripts/install_deps.sh); llama.cpp itself is not needed.
fsdpd_bench_script_test(bench_export_to_gguf export_to_gguf_test.py 120)
# bench/fp8_curves.py: the FP8 loss curves' verdict at each checkpoint, the control, the CSV and
# the picture.
fsdpd_bench_script_test(bench_fp8_curves fp8_curves_test.py 60)
# bench/capacity_table.py: the capacity boundaries, undecided trials and ratios.
fsdpd_bench_script_test(bench_capacity_table capacity_table_test.py 60)
