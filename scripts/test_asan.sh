#!/usr/bin/env bash
# The unit tests under AddressSanitizer and UndefinedBehaviorSanitizer, CPU build: a
# use-after-free, an overflow or a leak fails the test that caused it (for example
# ModelCpuBackendTest.BufferMayOutliveBackend), which a plain build would let pass. CI runs it
# after scripts/test.sh.
#
#   scripts/test_asan.sh                  # build-asan/, every unit test
#   scripts/test_asan.sh -R Model         # extra ctest arguments
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${FSDPD_ASAN_BUILD_DIR:-build-asan}
jobs=${FSDPD_JOBS:-$(nproc)}
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFSDPD_CUDA=OFF -DFSDPD_TESTS=ON \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$build_dir" -j "$jobs" --target unit_tests
# detect_leaks: a leak fails the test too. The fuzzers build their own ASan binaries.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$build_dir" -L unit -E '^fuzz_' --output-on-failure --no-tests=error -j "$jobs" "$@"
