#!/bin/bash
# Builds the binaries the GPU machine runs (Release, CUDA on) and packs them with the shared
# libraries that machine lacks: stripped binaries in .device/bin, libraries in .device/lib.
# The device run carries both, so together they must stay small (about 60 MiB).
#
#   bench/bundle_for_device.sh            # from the repository root
#   JOBS=4 BUILD_DIR=build-device bench/bundle_for_device.sh
set -euo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo_root"
build_dir=${BUILD_DIR:-build-device}
jobs=${JOBS:-2}
size_limit_mib=${SIZE_LIMIT_MIB:-60}
bundle_libs=${BUNDLE_LIBS:-$repo_root/../shared/device/bundle-libs.sh}

binaries=(fsdpd fsdpd-worker fsdpctl fsdpd-train cuda_kernels_bench cuda_memory_probe gemm_power_bench
  fp8_gemm_bench)
# The edge runtime and its benchmark, where Vulkan and glslc were found (bench/edge_bench.sh).
extras=(fsdpd-edge edge_bench)
gpu_tests=(cuda_kernels_test cuda_backend_test cuda_trainer_test cuda_llama_trainer_test
  cuda_grad_accum_test cuda_multirank_test profiler_cupti_test profiler_cuda_trainer_test)

if [ ! -x "$bundle_libs" ]; then
  echo "bundle_for_device: $bundle_libs is missing or not executable (set BUNDLE_LIBS)" >&2
  exit 2
fi

mkdir -p "$build_dir"
cmake -S "$repo_root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFSDPD_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 >"$build_dir/configure.log" 2>&1 || {
  tail -n 30 "$build_dir/configure.log" >&2
  exit 1
}

# Only targets this configuration defines (a test whose area is not built yet is left out).
targets=()
available=$(cmake --build "$build_dir" --target help | awk -F: '/^[A-Za-z0-9_.-]+: /{print $1}')
for target in "${binaries[@]}" "${gpu_tests[@]}" "${extras[@]}"; do
  if grep -qx "$target" <<<"$available"; then
    targets+=("$target")
  else
    echo "bundle_for_device: target $target is not defined in this build; skipped" >&2
  fi
done
# Keep going past a failed target: a gpu test whose post-build test listing needs the CUDA driver
# (absent on a build machine without a GPU) must not stop the rest from being bundled.
build_status=0
cmake --build "$build_dir" --target "${targets[@]}" -j"$jobs" -- -k 0 || build_status=$?

rm -rf .device/bin .device/lib .device/bundle.tar.xz
mkdir -p .device/bin .device/lib
for target in "${targets[@]}"; do
  binary=$(find "$build_dir" -type f -name "$target" -perm -u+x | head -n 1)
  if [ -z "$binary" ]; then
    case " ${binaries[*]} " in
      *" $target "*)
        echo "bundle_for_device: $target did not build (status $build_status)" >&2
        exit 1
        ;;
    esac
    echo "bundle_for_device: $target did not build; left out of the bundle" >&2
    continue
  fi
  strip --strip-unneeded -o ".device/bin/$target" "$binary"
done
"$bundle_libs" .device/bin/* .device/lib

unpacked_kib=$(du -sk .device | cut -f1)
echo "bundle_for_device: $(find .device/bin -type f | wc -l) binaries," \
  "$(find .device/lib -type f | wc -l) libraries, $((unpacked_kib / 1024)) MiB unpacked"
ls -la .device/bin
# OpenBLAS and the statically linked test binaries make the tree too big to carry as it is; xz
# packs it to about a fifth. bench/gpu_seed.sh unpacks .device/bundle.tar.xz when .device/bin
# is missing, so carry either the archive alone or the unpacked folders.
if [ "$unpacked_kib" -gt $((size_limit_mib * 1024)) ]; then
  tar -C .device -cf - bin lib | xz -T0 -6 >.device/bundle.tar.xz
  rm -rf .device/bin .device/lib
  echo "bundle_for_device: packed into .device/bundle.tar.xz" \
    "($(($(stat -c %s .device/bundle.tar.xz) / 1048576)) MiB); carry .device/bundle.tar.xz"
fi
total_kib=$(du -sk .device | cut -f1)
if [ "$total_kib" -gt $((size_limit_mib * 1024)) ]; then
  echo "bundle_for_device: .device is $((total_kib / 1024)) MiB, over the ${size_limit_mib} MiB limit" >&2
  exit 1
fi
echo "bundle_for_device: .device holds $((total_kib / 1024)) MiB"
