#!/bin/bash
# The two GPU tests that docs/testing.md says fail under a mutation, checked on the GPU machine.
#
# Here (no GPU needed), after bench/bundle_for_device.sh: builds each test with its mutation into
# .device/mut/ (xz-packed), restoring the source after each build.
#   bench/gpu_mutants.sh build
# On the GPU machine (carry .device): runs each mutant, which must FAIL, beside the bundle's
# unmutated test, which must pass.
#   OUT=/tmp/out bench/gpu_mutants.sh run
set -uo pipefail
repo_root=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo_root" || exit 1
build_dir=${BUILD_DIR:-build-device}

# name|source|sed expression|test target|gtest filter
mutants=(
  "multirank_in_proj_bias|worker/backend/cuda_ops.cc|s/dbias.data != nullptr ? dbias.as<float>() : nullptr/dbias.data != nullptr \&\& out_features != 3 * in_features ? dbias.as<float>() : nullptr/|cuda_multirank_test|*FollowsTheCpuEngine*"
  "adamw_grid_limit|kernels/cuda/adamw.cu|s/params.grid_limit > 0 ? params.grid_limit : kMaxGridX/kMaxGridX/|cuda_kernels_test|*CudaOptimizerSms*"
)

build() {
  mkdir -p .device/mut
  for entry in "${mutants[@]}"; do
    IFS='|' read -r name source expression target _ <<<"$entry"
    cp "$source" "$source.orig"
    sed -i "$expression" "$source"
    if cmp -s "$source" "$source.orig"; then
      echo "$name: the mutation did not apply to $source" >&2
      mv "$source.orig" "$source"
      return 1
    fi
    cmake --build "$build_dir" --target "$target" -j"${JOBS:-2}" >/dev/null
    local status=$?
    mv "$source.orig" "$source"
    # The restored copy is older than the mutant's objects: make the next build recompile it.
    touch "$source"
    [ $status -eq 0 ] || { echo "$name: $target did not build" >&2; return 1; }
    strip --strip-unneeded -o ".device/mut/$name" "$build_dir/tests/$target"
    xz -f -T0 -6 ".device/mut/$name"
  done
  cmake --build "$build_dir" --target cuda_multirank_test cuda_kernels_test -j"${JOBS:-2}" >/dev/null
  ls -la .device/mut
}

run() {
  out=${OUT:-$repo_root/bench-out}
  mkdir -p "$out"
  source "$repo_root/bench/device_env.sh" || return 1
  local status=0
  for entry in "${mutants[@]}"; do
    IFS='|' read -r name _ _ target filter <<<"$entry"
    timeout -k 5 240 "$bin/$target" --gtest_filter="$filter" >"$out/$target.unmutated.log" 2>&1
    local clean=$?
    xz -dc ".device/mut/$name.xz" >"/tmp/$name" && chmod +x "/tmp/$name"
    timeout -k 5 240 "/tmp/$name" --gtest_filter="$filter" >"$out/$name.log" 2>&1
    local mutated=$?
    echo "$name: unmutated $target exit $clean, mutant exit $mutated (must be 0 and non-zero)"
    grep -E "Failure|relative|grid|FAILED" "$out/$name.log" | head -n 8
    if [ $clean -ne 0 ] || [ $mutated -eq 0 ]; then status=1; fi
  done
  return $status
}

case "${1:-}" in
  build) build ;;
  run) run ;;
  *) echo "usage: bench/gpu_mutants.sh build|run" >&2; exit 2 ;;
esac
