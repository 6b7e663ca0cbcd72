#!/usr/bin/env bash
# README command 2: installs what is missing, builds, and runs every test that was built.
# Tests labelled `gpu` are built only where the CUDA toolkit is (nvcc; install_deps.sh does not
# install it): without it they are not built at all, and the configure's line "fsdpd tests not
# built: ..." says so, as it names every test area it leaves out and why. Built, they skip
# themselves where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install_deps.sh
build_dir=${FSDPD_BUILD_DIR:-build}
jobs=${FSDPD_JOBS:-$(nproc)}
# Tests on, whatever an earlier configure of the same folder chose (the demo turns them off).
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=${FSDPD_BUILD_TYPE:-RelWithDebInfo} \
  -DFSDPD_TESTS=ON ${FSDPD_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "$jobs"
ctest --test-dir "$build_dir" --output-on-failure --no-tests=error -j "$jobs" "$@"
