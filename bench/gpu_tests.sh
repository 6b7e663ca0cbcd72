#!/bin/bash
# Every GPU test binary of the bundle (bench/bundle_for_device.sh) on the GPU machine, each under
# a time limit, with a one-line verdict per binary and its log under $OUT.
#   OUT=/tmp/out bench/gpu_tests.sh
set -uo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo_root" || exit 1
out=${OUT:-$repo_root/bench-out}
mkdir -p "$out"
source "$repo_root/bench/device_env.sh" || exit 1
status=0
for test in ${GPU_TESTS:-cuda_kernels_test cuda_backend_test cuda_trainer_test cuda_multirank_test \
  cuda_llama_trainer_test profiler_cupti_test profiler_cuda_trainer_test}; do
  binary=.device/bin/$test
  if [ ! -x "$binary" ]; then
    echo "$test: not in the bundle"
    status=1
    continue
  fi
  timeout -k 5 "${TEST_SECONDS:-240}" "$binary" --gtest_color=no >"$out/$test.log" 2>&1
  code=$?
  [ $code -ne 0 ] && status=1
  echo "$test: exit $code, $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \]' "$out/$test.log" |
    tr '\n' ' ')"
  grep -E "Failure|relative distance" "$out/$test.log" | head -n 12
done
exit $status
