#!/bin/bash
# The CUDA engine's performance check in one device call (about 9.5 minutes at most):
#   1. bench/gpu_seed.sh: the GPU tests in GPU_TESTS, the seed job through the real daemon with
#      the default spec's profiling window (steps 20-22, activity only), and the PyTorch anchor
#      eager and compiled;
#   2. bench/gpu_shapes.sh with what is left of TOTAL_SECONDS: other shapes beside the anchor;
#   3. a head_dim 256 job with the own attention kernels forced (as on a worker without cuDNN),
#      which must fail at once with the error that names their limit.
# Every log goes to $OUT (and $OUT/logs.tgz).
#   OUT=/tmp/out bench/gpu_perf.sh      # after bench/bundle_for_device.sh
set -uo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo_root" || exit 1
out=${OUT:-$repo_root/bench-out}
mkdir -p "$out"
total=${TOTAL_SECONDS:-560}
started=$(date +%s)
source "$repo_root/bench/device_env.sh" || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv \
  >"$out/device.txt" 2>&1

echo "== seed"
OUT=$out/seed GPU_TESTS=${GPU_TESTS:-"cuda_kernels_test cuda_backend_test cuda_trainer_test"} \
  PROFILE_START=${PROFILE_START:-20} PROFILE_STEPS=${PROFILE_STEPS:-3} VARIANTS=${VARIANTS:-} \
  BUDGET_SECONDS=${SEED_SECONDS:-380} bash bench/gpu_seed.sh >"$out/seed_stdout.txt" 2>&1
echo "gpu_seed exit $?"
grep -E "test|exit" "$out/seed/gpu_seed.log" | grep -vE "^== .* test .*limit" | head -n 12
tail -n 9 "$out/seed_stdout.txt"

echo "== head_dim 256 with the own kernels forced"
spec=$(mktemp /tmp/fsdpd-head256-XXXXXX.yaml)
sed -E -e "s/^model: .*/model: {vocab: 32000, dim: 1024, layers: 1, heads: 4, ffn_mult: 4}/" \
  -e "s/steps: 40/steps: 2/" examples/seed.yaml >"$spec"
FSDPD_ATTENTION_KERNEL=tensor-core timeout -k 5 60 "$bin/fsdpd-train" --spec "$spec" \
  --device cuda:0 --checkpoint-dir "$(mktemp -d)" >"$out/head256_own.jsonl" 2>"$out/head256_own.log"
echo "fsdpd-train exit $?: $(grep -m1 -o 'attention with head_dim.*' "$out/head256_own.log" | head -c 400)"

left=$((total - ($(date +%s) - started)))
echo "== shapes ($left s left)"
OUT=$out BUDGET_SECONDS=$left bash bench/gpu_shapes.sh >"$out/shapes_stdout.txt" 2>&1
echo "gpu_shapes exit $?"
grep -vE "^== .*(fsdpd-train|anchor) " "$out/shapes/gpu_shapes.log" | head -n 60
rm -f "$out/seed/fsdpd_trace.json"  # tens of MB; the profile table holds its figures
tar czf "$out/logs.tgz" -C "$out" --exclude logs.tgz . 2>/dev/null
echo "total $(($(date +%s) - started)) s"
