#!/bin/bash
# Everything the GPU machine checks in one device call, within about 9 minutes: the seed
# benchmark beside the PyTorch anchor (bench/gpu_seed.sh, with a CUPTI profiling window on the
# daemon's job), the profiler's GPU test, compute-sanitizer memcheck on a small job and racecheck
# on the own attention kernels. Prints the figures and the failures; packs every log into
# $OUT/logs.tgz (the device tool returns few files, so one archive).
#   OUT=/tmp/out bench/gpu_all.sh
set -uo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo_root" || exit 1
out=${OUT:-$repo_root/bench-out}
logs=$(mktemp -d /tmp/fsdpd-gpu-all-XXXXXX)
mkdir -p "$out"
source "$repo_root/bench/device_env.sh" || exit 1
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
# Packed after every part, so a run cut short by the device's time limit still brings its logs.
pack() { tar czf "$out/logs.tgz" -C "$logs" . 2>/dev/null; }

echo "== seed benchmark"
OUT=$logs GPU_TESTS="${GPU_TESTS:-cuda_trainer_test}" PROFILE_START=${PROFILE_START:-36} \
  VARIANTS=${VARIANTS:-none} BUDGET_SECONDS=${SEED_SECONDS:-330} bash bench/gpu_seed.sh \
  >"$logs/gpu_seed_stdout.txt" 2>&1
echo "gpu_seed exit $?"
tail -n 24 "$logs/gpu_seed_stdout.txt"
head -n 40 "$logs/fsdpd_profile_table.txt" 2>/dev/null
pack

echo "== profiler GPU test"
timeout -k 5 150 "$bin/profiler_cuda_trainer_test" --gtest_color=no >"$logs/profiler_gpu.log" 2>&1
echo "profiler_cuda_trainer_test exit $?"
grep -E "Failure|Expected|Which is|Value of|counter step|device window|trace:|overhead|waited|PASSED|FAILED" \
  "$logs/profiler_gpu.log" | head -n 50
pack

echo "== memcheck"
OUT=$logs SANITIZER_TOOLS=memcheck SANITIZER_KERNELS=auto SANITIZER_LIMIT=110 \
  bash bench/gpu_sanitize.sh
grep -m 24 -E "Invalid|Address|at 0x|by thread|Saved host backtrace|ERROR" \
  "$logs/sanitize_memcheck_auto.log"
pack

echo "== racecheck (own attention kernels)"
timeout -k 5 90 "$sanitizer" --tool racecheck --error-exitcode 99 "$bin/cuda_kernels_test" \
  --gtest_filter='*KernelPath*TensorCores*:*KernelPath*CudaCores*' >"$logs/racecheck_attention.log" 2>&1
echo "racecheck exit $?: $(grep -E 'RACECHECK SUMMARY|PASSED|FAILED' "$logs/racecheck_attention.log" | tr '\n' ' ')"

pack && rm -rf "$logs"
