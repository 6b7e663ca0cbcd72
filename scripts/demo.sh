#!/usr/bin/env bash
# The fsdpd demo: builds everything, starts a coordinator and two CPU workers on loopback,
# trains examples/demo.yaml while watching it live, prints a summary and shuts down.
#
#   ./scripts/demo.sh
#
# Environment: FSDPD_DEMO_BUILD_DIR (default ./build), FSDPD_DEMO_JOBS (parallel build jobs),
# FSDPD_DEMO_KEEP=1 keeps the temporary state and logs for a look afterwards.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FSDPD_DEMO_BUILD_DIR:-$repo/build}"
spec="$repo/examples/demo.yaml"

say() { printf '\n==> %s\n' "$*"; }

say "installing missing dependencies"
"$repo/scripts/install_deps.sh"

say "building fsdpd, fsdpd-worker and fsdpctl ($build)"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFSDPD_TESTS=OFF >/dev/null
elif [ ! -f "$build/build.ninja" ]; then
  cmake -S "$repo" -B "$build" >/dev/null  # an earlier configure stopped half-way
fi
# An existing build dir keeps its own settings (a developer's tree may have tests on).
cmake --build "$build" --target fsdpd fsdpd-worker fsdpctl -j "${FSDPD_DEMO_JOBS:-$(nproc)}"

fsdpd="$build/server/fsdpd"
worker="$build/worker/fsdpd-worker"
fsdpctl="$build/client/fsdpctl"

work="$(mktemp -d "${TMPDIR:-/tmp}/fsdpd-demo.XXXXXX")"
pids=()

cleanup() {
  local status=$?
  # Workers first, so they can report to a coordinator that is still there.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${pids[$i]}" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ "$status" -ne 0 ]; then
    echo "demo failed (exit $status); logs:" >&2
    for log in "$work"/*.log; do
      [ -f "$log" ] || continue
      echo "---- $(basename "$log") (last lines)" >&2
      tail -n 20 "$log" >&2
    done
  fi
  if [ "${FSDPD_DEMO_KEEP:-0}" = 1 ]; then
    echo "state and logs kept in $work"
  else
    rm -rf "$work"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

listen="127.0.0.1:$(free_port)"
metrics="127.0.0.1:$(free_port)"
export FSDPD_COORDINATOR="$listen"

say "starting fsdpd on $listen (metrics on http://$metrics/metrics)"
"$fsdpd" --listen "$listen" --metrics-listen "$metrics" --state-dir "$work/state" \
  >"$work/fsdpd.log" 2>&1 &
pids+=($!)
for _ in $(seq 150); do
  grep -q "fsdpd listening on" "$work/fsdpd.log" && break
  kill -0 "${pids[0]}" 2>/dev/null || { echo "fsdpd exited during startup" >&2; exit 1; }
  sleep 0.2
done
grep -q "fsdpd listening on" "$work/fsdpd.log" || { echo "fsdpd did not start" >&2; exit 1; }

say "starting two CPU workers"
for rank in 0 1; do
  "$worker" --coordinator "$listen" --device cpu --checkpoint-root "$work/checkpoints" \
    --allowed-root "$repo/examples" \
    --hostname "demo-worker-$rank" >"$work/worker$rank.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 150); do
  idle=$("$fsdpctl" --json workers 2>/dev/null |
    python3 -c 'import json, sys; print(sum(w["state"] == "IDLE" for w in json.load(sys.stdin)["workers"]))' \
    2>/dev/null || echo 0)
  [ "$idle" -ge 2 ] && break
  sleep 0.2
done
"$fsdpctl" workers

say "submitting examples/demo.yaml and watching it"
started=$(date +%s.%N)
watch_status=0
"$fsdpctl" submit "$spec" --watch || watch_status=$?
finished=$(date +%s.%N)

job=$("$fsdpctl" --json list | python3 -c 'import json, sys; print(json.load(sys.stdin)["jobs"][-1]["id"])')
say "summary"
"$fsdpctl" --json watch "$job" >"$work/history.jsonl" || true
python3 - "$work/history.jsonl" "$started" "$finished" <<'PYTHON'
import json, sys
events = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
steps = [e for e in events if e.get("type") == "step"]
states = [e for e in events if e.get("type") == "state"]
wall = float(sys.argv[3]) - float(sys.argv[2])
print(f"final state      {states[-1]['state'] if states else 'unknown'}")
if steps:
    rates = [s["tokens_per_second"] for s in steps if s["tokens_per_second"] > 0]
    print(f"steps            {steps[-1]['step']}")
    print(f"loss             {steps[0]['loss']:.4f} at step {steps[0]['step']} -> "
          f"{steps[-1]['loss']:.4f} at step {steps[-1]['step']}")
    if rates:
        print(f"tokens/s         {sum(rates) / len(rates):.0f} on average over both ranks")
print(f"wall time        {wall:.1f} s (submit to finish)")
PYTHON
exit "$watch_status"
