#!/usr/bin/env bash
# The unit tests under AddressSanitizer and UndefinedBehaviorSanitizer, so that a use-after-free,
# an overflow or undefined behaviour in code a unit test reaches aborts that test (for example
# ModelCpuBackend.BufferMayOutliveBackend). CPU only (-DFSDPD_CUDA=OFF): ASan does not see device
# memory, and the integration and GPU tests stay with scripts/test.sh. .ci/run calls this after
# scripts/test.sh.
#
#   scripts/test_asan.sh [ctest arguments...]
#   FSDPD_ASAN_BUILD_DIR (default build-asan), FSDPD_JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${FSDPD_ASAN_BUILD_DIR:-build-asan}
jobs=${FSDPD_JOBS:-$(nproc)}
sanitize="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFSDPD_TESTS=ON \
  -DFSDPD_CUDA=OFF "-DCMAKE_CXX_FLAGS=$sanitize" "-DCMAKE_C_FLAGS=$sanitize" \
  "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" \
  "-DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=address,undefined"
# Only the unit tests: the custom target `unit_tests` (tests/CMakeLists.txt) depends on each
# binary labelled `unit`, and on the libraries they link, nothing else.
cmake --build "$build_dir" -j "$jobs" --target unit_tests

# A finding makes the test process exit non-zero, which fails the test. Leak checking stays on;
# halt_on_error makes the first report final.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:halt_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
ctest --test-dir "$build_dir" --output-on-failure --no-tests=error -j "$jobs" -L '^unit$' "$@"
