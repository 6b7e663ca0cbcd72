#!/bin/bash
# The seed benchmark on one GPU, in one go (about 8 minutes at most):
#   1. the gpu tests (.device/bin/*_test),
#   2. fsdpd + one `fsdpd-worker --device cuda:0` training examples/seed.yaml, watched with
#      `fsdpctl --json watch`,
#   3. the PyTorch anchor (bench/anchor/seed_train_fsdp.py, copied there before the run) with
#      torchrun, eager and COMPILE=1, on the same shapes and step count,
#   4. one table: median tokens/s and step ms over steps 11..40, peak memory (allocator and
#      driver) and the ratios fsdpd ÷ anchor (bench/summarize_watch.py).
# Run from the repository root after bench/bundle_for_device.sh, with the binaries in .device/bin
# and their libraries in .device/lib. Logs go to $OUT (default: bench-out/).
#   OUT=/tmp/out bench/gpu_seed.sh
set -uo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo_root" || exit 1
out=${OUT:-$repo_root/bench-out}
mkdir -p "$out"
source "$repo_root/bench/device_env.sh" || exit 1
[ -x "$bin/fsdpd-train" ] || { echo "gpu_seed: no binaries in $bin (run bench/bundle_for_device.sh)" >&2; exit 1; }
# SPEC trains another one-GPU spec: examples/llama.yaml, with
# ANCHOR=bench/anchor/llama_train_fsdp.py (bench/device_env.sh).
spec=${SPEC:-$repo_root/examples/seed.yaml}
budget_seconds=${BUDGET_SECONDS:-480}
started=$(date +%s)
work=$(mktemp -d /tmp/fsdpd-gpu-seed-XXXXXX)
pids=()
summary=()

say() { echo "== $(date +%H:%M:%S) $*" | tee -a "$out/gpu_seed.log"; }

# The smaller of a part's own limit and what is left of the budget (at least 10 s).
limit() {
  local left=$((budget_seconds - ($(date +%s) - started)))
  local wanted=$1
  [ "$left" -lt "$wanted" ] && wanted=$left
  [ "$wanted" -lt 10 ] && wanted=10
  echo "$wanted"
}

stop_started() {
  # Only the processes this script started, newest first.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill "${pids[$i]}" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  pids=()
}
trap 'stop_started; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

say "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo unknown)"

# 1. The gpu tests.
# GPU_TESTS and ANCHOR_MODES narrow the run when device time is short (GPU_TESTS="" runs none;
# unset, the list below).
for test in ${GPU_TESTS-cuda_kernels_test cuda_backend_test cuda_trainer_test profiler_cupti_test profiler_cuda_trainer_test}; do
  if [ ! -x "$bin/$test" ]; then
    summary+=("$test: not bundled")
    continue
  fi
  case $test in
    cuda_trainer_test | cuda_kernels_test) own=120 ;;
    profiler_cuda_trainer_test) own=150 ;;
    *) own=60 ;;
  esac
  say "test $test (limit $(limit $own) s)"
  timeout -k 5 "$(limit $own)" "$bin/$test" --gtest_color=no >"$out/$test.log" 2>&1
  status=$?
  result=$(grep -E '^\[  (PASSED|FAILED|SKIPPED)  \]|^\[  SKIPPED \]' "$out/$test.log" | sort -u | tr '\n' ' ')
  [ "$status" = 124 ] && result="TIMED OUT $result"
  summary+=("$test: exit $status $result")
  say "$test: exit $status"
done

# 1b. Kernel timings (KERNEL_BENCH=1): attention through cuDNN and through the own kernels.
if [ "${KERNEL_BENCH:-0}" = 1 ] && [ -x "$bin/cuda_kernels_bench" ]; then
  for kernel in auto tensor-core; do
    say "cuda_kernels_bench, attention kernel $kernel (limit $(limit 60) s)"
    FSDPD_ATTENTION_KERNEL=$kernel timeout -k 5 "$(limit 60)" "$bin/cuda_kernels_bench" \
      >"$out/cuda_kernels_bench_$kernel.txt" 2>&1
    say "cuda_kernels_bench $kernel exit $?"
  done
fi

# 2. fsdpd on the seed workload (DAEMON=0 skips it, for runs of the variants alone).
if [ "${DAEMON:-1}" = 1 ]; then
  listen="127.0.0.1:$(free_port)"
  metrics="127.0.0.1:$(free_port)"
  export FSDPD_COORDINATOR="$listen"
  watch_file=$out/fsdpd_watch.jsonl
  : >"$watch_file"
  say "fsdpd on $listen, one worker on cuda:0"
  "$bin/fsdpd" --listen "$listen" --metrics-listen "$metrics" --state-dir "$work/state" \
    >"$out/fsdpd.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    grep -q "fsdpd listening on" "$out/fsdpd.log" && break
    sleep 0.2
  done
  "$bin/fsdpd-worker" --coordinator "$listen" --device cuda:0 --checkpoint-root "$work/checkpoints" \
    --hostname gpu-seed-worker >"$out/fsdpd-worker.log" 2>&1 &
  pids+=($!)
  idle=0
  for _ in $(seq 150); do
    idle=$("$bin/fsdpctl" --json workers 2>/dev/null | python3 -c \
      'import json, sys; print(sum(w["state"] == "IDLE" for w in json.load(sys.stdin)["workers"]))' \
      2>/dev/null || echo 0)
    [ "$idle" -ge 1 ] && break
    kill -0 "${pids[-1]}" 2>/dev/null || break  # the worker exited (see its log)
    sleep 0.2
  done
  if [ "$idle" -ge 1 ]; then
    "$bin/fsdpctl" workers >"$out/fsdpd_workers.txt" 2>&1
    start_memory_sampler "$out/fsdpd_driver_memory.csv"
    # PROFILE_START=N profiles PROFILE_STEPS steps from step N through the spec's profile section
    # (device timing from CUPTI; PROFILE_COUNTERS=true adds the range profiler's kernel replay,
    # which makes those steps far slower on a model this size).
    job_spec=$spec
    if [ -n "${PROFILE_START:-}" ]; then
      job_spec=$work/seed_profiled.yaml
      sed -E "s/^profile:.*/profile: {start_step: $PROFILE_START, steps: ${PROFILE_STEPS:-2}, counters: ${PROFILE_COUNTERS:-false}}/" \
        "$spec" >"$job_spec"
    fi
    job=$("$bin/fsdpctl" --json submit "$job_spec" 2>"$out/fsdpd_submit.err" |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])' 2>/dev/null)
    if [ -n "$job" ]; then
      say "job $job submitted; watching (limit $(limit 150) s)"
      timeout -k 5 "$(limit 150)" "$bin/fsdpctl" --json watch "$job" >"$watch_file" 2>"$out/fsdpd_watch.err"
      say "watch ended with $?; final status: $("$bin/fsdpctl" --json status "$job" 2>&1 | head -c 400)"
      "$bin/fsdpctl" logs "$job" >"$out/fsdpd_job_logs.txt" 2>&1
      if [ -n "${PROFILE_START:-}" ]; then
        "$bin/fsdpctl" profile "$job" >"$out/fsdpd_profile_table.txt" 2>&1
        say "profile table: exit $? ($(wc -l <"$out/fsdpd_profile_table.txt") lines)"
        "$bin/fsdpctl" --json profile "$job" >"$out/fsdpd_profile_table.json" 2>&1
        "$bin/fsdpctl" trace "$job" -o "$out/fsdpd_trace.json" >"$out/fsdpd_trace.txt" 2>&1
        say "trace: exit $? ($(stat -c %s "$out/fsdpd_trace.json" 2>/dev/null || echo 0) bytes)"
      fi
    else
      say "submit failed: $(head -c 400 "$out/fsdpd_submit.err")"
    fi
    stop_memory_sampler
  else
    say "the worker did not register as IDLE; see fsdpd-worker.log"
  fi
  stop_started
fi
# Without a step from the coordinator path, the engine alone still gives the figures.
if [ "${DAEMON:-1}" = 1 ] && ! grep -q '"type":"step"' "$watch_file" && [ -x "$bin/fsdpd-train" ]; then
  say "no steps through the coordinator; running fsdpd-train directly (limit $(limit 150) s)"
  start_memory_sampler "$out/fsdpd_driver_memory.csv"
  timeout -k 5 "$(limit 150)" "$bin/fsdpd-train" --spec "$spec" --device cuda:0 \
    --checkpoint-dir "$work/train-checkpoints" >"$watch_file" 2>"$out/fsdpd_train.log"
  say "fsdpd-train exit $?"
  stop_memory_sampler
fi

# 2b. Variants of the spec, each straight through fsdpd-train, beside the daemon's run:
# VARIANTS="none block" sets parallel.activation_recompute; "/"-separated suffixes add switches:
# "/optimizer-on-comm" runs the optimizer in backward on the comm stream
# (FSDPD_OPTIMIZER_STREAM=comm), "/compute-first" gives the compute stream the higher priority
# (FSDPD_STREAM_PRIORITY=compute), "/comm-first" the comm stream (FSDPD_STREAM_PRIORITY=comm),
# "/prefetch2" issues the gathers two units ahead (FSDPD_PREFETCH_UNITS=2), "/fp32-master" keeps
# the plain fp32 master cast at every gather instead of the split one (FSDPD_MASTER_LAYOUT=fp32),
# "/sms16" (any count) keeps the optimizer to 16 SMs and plans the GEMMs for the rest
# (FSDPD_OPTIMIZER_SMS=16; it needs "/optimizer-on-comm");
# e.g. VARIANTS="ffn ffn/compute-first ffn/compute-first/optimizer-on-comm none/optimizer-on-comm/sms16".
# A variant listed twice (runs in alternation) keeps both runs' files: names carry the position.
position=0
for variant in ${VARIANTS:-}; do
  recompute=${variant%%/*}
  position=$((position + 1))
  name=${position}_${variant//\//_}
  optimizer_stream=compute
  stream_priority=equal
  prefetch_units=1
  master_layout=split
  optimizer_sms=0
  case "$variant/" in *"/sms"[0-9]*) optimizer_sms=$(sed -E 's|.*/sms([0-9]+).*|\1|' <<<"$variant") ;; esac
  case "$variant/" in *"/optimizer-on-comm/"*) optimizer_stream=comm ;; esac
  case "$variant/" in *"/compute-first/"*) stream_priority=compute ;; esac
  case "$variant/" in *"/comm-first/"*) stream_priority=comm ;; esac
  case "$variant/" in *"/prefetch2/"*) prefetch_units=2 ;; esac
  case "$variant/" in *"/fp32-master/"*) master_layout=fp32 ;; esac
  variant_spec=$work/seed_$name.yaml
  sed -E "s/activation_recompute: [a-z]+/activation_recompute: $recompute/" "$spec" >"$variant_spec"
  say "fsdpd-train, activation_recompute $recompute, optimizer on the $optimizer_stream stream, stream priority $stream_priority, gathers $prefetch_units ahead, $master_layout master, optimizer SMs $optimizer_sms (0: all) (limit $(limit 90) s)"
  start_memory_sampler "$out/variant_${name}_driver_memory.csv"
  FSDPD_OPTIMIZER_STREAM=$optimizer_stream FSDPD_STREAM_PRIORITY=$stream_priority \
    FSDPD_PREFETCH_UNITS=$prefetch_units FSDPD_MASTER_LAYOUT=$master_layout \
    FSDPD_OPTIMIZER_SMS=$optimizer_sms \
    timeout -k 5 "$(limit 90)" "$bin/fsdpd-train" \
    --spec "$variant_spec" --device cuda:0 --checkpoint-dir "$work/variant-$name" \
    >"$out/variant_$name.jsonl" 2>"$out/variant_$name.log"
  say "fsdpd-train $variant exit $?"
  stop_memory_sampler
  python3 "$repo_root/bench/summarize_watch.py" --watch "$out/variant_$name.jsonl" --first 11 \
    --last 40 --driver-samples "$out/variant_${name}_driver_memory.csv" \
    --json "$out/variant_$name.json" >"$out/variant_$name.txt" 2>&1
  summary+=("variant $variant: $(tr '\n' ' ' <"$out/variant_$name.txt" | head -c 400)")
done

# 3. The PyTorch anchor, eager and compiled, 40 steps with the first ten as warm-up.
anchor_args=()
for mode in ${ANCHOR_MODES:-eager compile}; do
  if [ ! -f "$anchor" ] || [ ! -x "$torchrun_bin" ]; then
    say "anchor $mode skipped: $anchor or $torchrun_bin missing"
    continue
  fi
  compile=0
  own=100
  [ "$mode" = compile ] && compile=1 && own=200
  say "anchor $mode (limit $(limit $own) s)"
  start_memory_sampler "$out/anchor_${mode}_driver_memory.csv"
  COMPILE=$compile STEPS=40 WARM=10 timeout -k 5 "$(limit $own)" "$torchrun_bin" --standalone \
    --nproc_per_node=1 "$anchor" >"$out/anchor_$mode.log" 2>&1
  say "anchor $mode exit $?: $(grep RESULT "$out/anchor_$mode.log")"
  stop_memory_sampler
  anchor_args+=(--anchor "anchor-$mode=$out/anchor_$mode.log"
    --anchor-driver-samples "anchor-$mode=$out/anchor_${mode}_driver_memory.csv")
done

# 4. The table.
say "summary (total $(($(date +%s) - started)) s)"
for line in "${summary[@]}"; do echo "  $line" | tee -a "$out/gpu_seed.log"; done
status=0
if [ "${DAEMON:-1}" = 1 ]; then
  python3 "$repo_root/bench/summarize_watch.py" --watch "$watch_file" --first 11 --last 40 \
    --driver-samples "$out/fsdpd_driver_memory.csv" "${anchor_args[@]}" \
    --json "$out/summary.json" | tee "$out/summary.txt"
  status=${PIPESTATUS[0]}
fi
# Each variant against the same anchor runs.
position=0
for variant in ${VARIANTS:-}; do
  position=$((position + 1))
  name=${position}_${variant//\//_}
  echo "-- variant $variant" | tee -a "$out/summary.txt"
  python3 "$repo_root/bench/summarize_watch.py" --watch "$out/variant_$name.jsonl" --first 11 \
    --last 40 --driver-samples "$out/variant_${name}_driver_memory.csv" "${anchor_args[@]}" \
    --json "$out/summary_$name.json" | tee -a "$out/summary.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done
exit "$status"
