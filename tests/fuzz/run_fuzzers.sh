#!/usr/bin/env bash
# Builds the libFuzzer targets with clang++-14 (ASan + libFuzzer) and runs each one for a
# bounded time over its committed seed corpus. Exits non-zero on a build failure or on any
# finding (crash, leak, sanitizer report, timeout); the reproducer is left in the work dir.
#
#   tests/fuzz/run_fuzzers.sh [WORK_DIR]      FUZZ_SECONDS=20 by default, FUZZ_TARGETS to pick
set -euo pipefail

SOURCE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WORK_DIR="${1:-${TMPDIR:-/tmp}/fsdpd-fuzz}"
SECONDS_PER_TARGET="${FUZZ_SECONDS:-20}"
TARGETS="${FUZZ_TARGETS:-spec_parser token_file safetensors checkpoint_manifest}"
CXX="${FUZZ_CXX:-clang++-14}"
JOBS="${FUZZ_JOBS:-2}"

command -v "$CXX" >/dev/null || { echo "run_fuzzers: $CXX not found" >&2; exit 1; }
command -v protoc >/dev/null || { echo "run_fuzzers: protoc not found" >&2; exit 1; }
LAUNCHER=""
command -v ccache >/dev/null && LAUNCHER="ccache"

mkdir -p "$WORK_DIR/generated" "$WORK_DIR/objects"
protoc --proto_path="$SOURCE_DIR/proto" --cpp_out="$WORK_DIR/generated" \
  fsdpd/v1/common.proto fsdpd/v1/spec.proto

PACKAGES="absl_status absl_statusor absl_strings absl_str_format protobuf yaml-cpp spdlog"
CFLAGS="-std=c++17 -g -O1 -fno-omit-frame-pointer -I$SOURCE_DIR -I$WORK_DIR/generated \
  $(pkg-config --cflags $PACKAGES)"
LIBS="$(pkg-config --libs $PACKAGES) -pthread"

# Project sources are instrumented for coverage; the generated protobuf code only for ASan.
LIBRARY_SOURCES=(
  proto/spec/job_spec.cc proto/spec/job_spec_estimates.cc
  proto/spec/validate_sections.cc proto/spec/validate_parallel.cc proto/spec/spec_paths.cc
  proto/spec/spec_path_fields.cc proto/spec/validate_eval.cc proto/spec/validate_accumulation.cc
  formats/durable_file.cc formats/half.cc formats/mapped_file.cc formats/safetensors.cc
  worker/data/data_loader.cc worker/data/path_policy.cc
  worker/data/synthetic_tokens.cc worker/data/window_data_loader.cc
  worker/data/sharded_data_loader.cc worker/data/token_shards.cc worker/data/sample_order.cc
  worker/checkpoint/checkpoint.cc worker/checkpoint/crc32c.cc worker/checkpoint/rank_file.cc
  worker/checkpoint/root_probe.cc)

# Every source is compiled each run: a header (the generated spec.pb.h above all) can change
# under an unchanged source, and an object built against the old layout reads past the new
# message's end. ccache, where present, keeps this cheap and tracks the headers itself.
compile() {  # compile SOURCE OBJECT FLAGS...
  local source="$1" object="$2"
  shift 2
  $LAUNCHER "$CXX" $CFLAGS "$@" -c "$source" -o "$object"
}

OBJECTS=()
pids=()
for proto in common spec; do
  object="$WORK_DIR/objects/$proto.pb.o"
  compile "$WORK_DIR/generated/fsdpd/v1/$proto.pb.cc" "$object" -fsanitize=address &
  pids+=($!)
  OBJECTS+=("$object")
  while (( $(jobs -rp | wc -l) >= JOBS )); do sleep 0.2; done
done
for source in "${LIBRARY_SOURCES[@]}"; do
  object="$WORK_DIR/objects/$(echo "$source" | tr '/' '_').o"
  compile "$SOURCE_DIR/$source" "$object" -fsanitize=fuzzer-no-link,address &
  pids+=($!)
  OBJECTS+=("$object")
  while (( $(jobs -rp | wc -l) >= JOBS )); do sleep 0.2; done
done
for pid in "${pids[@]}"; do wait "$pid"; done

status=0
for target in $TARGETS; do
  binary="$WORK_DIR/${target}_fuzzer"
  $LAUNCHER "$CXX" $CFLAGS -fsanitize=fuzzer,address \
    "$SOURCE_DIR/tests/fuzz/${target}_fuzzer.cc" "${OBJECTS[@]}" $LIBS -o "$binary"
  # New inputs go to a scratch corpus; the committed seeds stay small and read-only.
  scratch="$WORK_DIR/corpus/$target"
  mkdir -p "$scratch"
  echo "== $target: ${SECONDS_PER_TARGET}s"
  if ! (cd "$WORK_DIR" && "$binary" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 \
        -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
        -artifact_prefix="$WORK_DIR/${target}-" \
        "$scratch" "$SOURCE_DIR/tests/fuzz/corpus/$target"); then
    echo "run_fuzzers: $target found a problem; reproducer under $WORK_DIR/${target}-*" >&2
    status=1
  fi
done
exit $status
