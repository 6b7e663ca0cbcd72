#!/usr/bin/env bash
# README command 2: installs what is missing, builds, and runs every test.
# Tests labelled `gpu` skip themselves where no GPU is present.
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
