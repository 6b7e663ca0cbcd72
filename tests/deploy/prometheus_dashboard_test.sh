#!/usr/bin/env bash
# Integration: every PromQL query of deploy/grafana/fsdpd.json returns data from a real
# Prometheus scraping a real fsdpd, while a CPU job trains on two fsdpd-workers and again after
# the job ended and its series left /metrics; both alerts of a lost worker fire and resolve.
#
# Starts, all on loopback ports each server picks itself (port 0, read back from its log): fsdpd (short heartbeat timeout and metrics
# retention), two `fsdpd-worker --device cpu`, and `prometheus` (scraping every second) with
# deploy/prometheus/rules. Prometheus loads a copy of the shipped rule file whose `for:` and
# `[5m]` windows are shortened to seconds, so that firing and resolving take seconds; the
# expressions, labels and annotations are the shipped ones (promtool tests the real windows).
#
#  1. Submits a tiny job with a profiling window and waits until it trained past the window.
#     Every panel has data, queried as Grafana does (instant panels at now, the others over
#     the last minutes); kernel throughput panels are skipped, with the reason, when the job's
#     spec has no hardware counters (a CPU job has none). $job's label_values(fsdpd_job_info,
#     job) lists the job.
#     `fsdpctl profile --roofline` writes an SVG with one mark per kernel of the table.
#  2. Kills one worker (SIGKILL): the job fails and the worker is LOST, so FsdpdJobFailed and
#     FsdpdWorkerLost fire.
#  3. Restarts that worker on the same host and device: it takes its old id back, and
#     FsdpdWorkerLost resolves; FsdpdJobFailed resolves once the failure is out of its window.
#  4. After the metrics retention the job's series are gone from /metrics, and every panel still
#     has data for the finished job.
#
# Binaries: $FSDPD_BINARY, $FSDPD_WORKER_BINARY, $FSDPCTL_BINARY, or found under
# $FSDPD_BUILD_DIR. Sources: $FSDPD_SOURCE_DIR (default: this script's repository).
set -euo pipefail

script_dir=$(cd "$(dirname "$0")" && pwd)
source_dir=${FSDPD_SOURCE_DIR:-$(cd "$script_dir/../.." && pwd)}
build_dir=${FSDPD_BUILD_DIR:-$source_dir/build}

find_binary() {  # find_binary NAME → path of the built binary
  local found
  found=$(find "$build_dir" -type f -name "$1" -perm -u+x -not -path '*/CMakeFiles/*' \
    2>/dev/null | head -n 1)
  if [ -z "$found" ]; then
    echo "prometheus_dashboard_test: $1 is not built under $build_dir" >&2
    return 1
  fi
  echo "$found"
}
fsdpd=${FSDPD_BINARY:-$(find_binary fsdpd)}
worker=${FSDPD_WORKER_BINARY:-$(find_binary fsdpd-worker)}
fsdpctl=${FSDPCTL_BINARY:-$(find_binary fsdpctl)}
for tool in prometheus curl python3; do
  command -v "$tool" >/dev/null || {
    echo "prometheus_dashboard_test: $tool not found" >&2
    exit 1
  }
done

work=$(mktemp -d)
pids=()
job_id=
cleanup() {
  local status=$?
  if [ -n "$job_id" ]; then "$fsdpctl" cancel "$job_id" >/dev/null 2>&1 || true; fi
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ $status -ne 0 ]; then
    for log in "$work"/*.log; do
      [ -e "$log" ] || continue
      echo "---- last lines of $(basename "$log") ----" >&2
      tail -n 30 "$log" >&2
    done
  fi
  rm -rf "$work"
}
trap cleanup EXIT

wait_until() {  # wait_until SECONDS WHAT COMMAND...
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "FAIL: timed out waiting for $what" >&2
      return 1
    fi
    sleep 0.5
  done
}

logged_port() {  # logged_port LOG PATTERN: the port of the first "PATTERN127.0.0.1:PORT" in LOG
  grep -m1 -oE "$2"'127\.0\.0\.1:[0-9]+' "$1" 2>/dev/null | grep -oE '[0-9]+$'
}

# A short metrics retention, so the finished job's series are seen to go; a short heartbeat
# timeout, so a killed worker is LOST within seconds. fsdpd logs the ports it bound.
"$fsdpd" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  --state-dir "$work/state" --heartbeat-timeout 3s --metrics-retention 3s \
  >"$work/fsdpd.log" 2>&1 &
pids+=($!)
wait_until 30 "fsdpd to listen" logged_port "$work/fsdpd.log" 'fsdpd listening on '
grpc_port=$(logged_port "$work/fsdpd.log" 'fsdpd listening on ')
metrics_port=$(logged_port "$work/fsdpd.log" 'metrics on ')
export FSDPD_COORDINATOR=127.0.0.1:$grpc_port
wait_until 30 "fsdpd's /metrics" curl -sf "http://127.0.0.1:$metrics_port/metrics"

start_worker() {  # start_worker RANK: a CPU worker on this host; its pid in worker_pids[RANK]
  "$worker" --coordinator "127.0.0.1:$grpc_port" --device cpu \
    --checkpoint-root "$work/checkpoints" --heartbeat-interval 500ms \
    >>"$work/worker-$1.log" 2>&1 &
  pids+=($!)
  worker_pids[$1]=$!
}
declare -a worker_pids
start_worker 0
start_worker 1
workers_json() {  # the registry as a JSON list, whatever shape `fsdpctl workers --json` has
  "$fsdpctl" workers --json | python3 -c '
import json, sys
text = sys.stdin.read()
try:
    workers = json.loads(text)
except json.JSONDecodeError:  # one object per line
    workers = [json.loads(line) for line in text.splitlines() if line.strip()]
if isinstance(workers, dict):
    workers = workers.get("workers", [])
print(json.dumps(workers))'
}
count_workers() {  # count_workers STATE → how many workers are in that state
  workers_json | python3 -c '
import json, sys
state = sys.argv[1]
print(sum(1 for w in json.load(sys.stdin) if str(w.get("state", "")).upper().endswith(state)))
' "$1"
}
two_idle_workers() { [ "$(count_workers IDLE)" -ge 2 ]; }
wait_until 60 "two idle workers" two_idle_workers

# The shipped rules with their waits in seconds (same expressions).
rules=$source_dir/deploy/prometheus/rules/fsdpd.rules.yml
python3 - "$rules" "$work/fsdpd.fast.rules.yml" <<'PYTHON'
import re
import sys

text = open(sys.argv[1]).read()
text = re.sub(r"^(\s+for:) \S+$", r"\1 3s", text, flags=re.M)
text = text.replace("[5m]", "[20s]")
open(sys.argv[2], "w").write(text)
PYTHON
cat >"$work/prometheus.yml" <<CONFIG
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $work/fsdpd.fast.rules.yml
scrape_configs:
  - job_name: fsdpd
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:$metrics_port"]
CONFIG
# Info level: Prometheus logs the port it bound ("Listening on" address=127.0.0.1:PORT).
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address=127.0.0.1:0 --log.level=info >"$work/prometheus.log" 2>&1 &
pids+=($!)
wait_until 60 "Prometheus to listen" logged_port "$work/prometheus.log" 'msg="Listening on" address='
prometheus_port=$(logged_port "$work/prometheus.log" 'msg="Listening on" address=')
prometheus_url=http://127.0.0.1:$prometheus_port
wait_until 60 "Prometheus to be ready" curl -sf "$prometheus_url/-/ready"
panels_tool=$script_dir/prometheus_panels.py

# Tiny, and long enough to be still RUNNING while the panels are queried; no restarts, so the
# lost worker fails it.
profile_start=5
profile_steps=3
cat >"$work/job.yaml" <<SPEC
name: dashboard-check
model: {vocab: 256, dim: 64, layers: 2, heads: 4, ffn_mult: 4}
data: {source: synthetic, seq_len: 64}
train: {batch_size: 2, steps: 100000, lr: 1.0e-3, seed: 0}
parallel: {world_size: 2, device: cpu, param_dtype: fp32}
checkpoint: {every_steps: 0, keep: 1}
profile: {start_step: $profile_start, steps: $profile_steps, counters: true}
max_restarts: 0
SPEC
job_id=$("$fsdpctl" submit "$work/job.yaml" --json |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
echo "submitted job $job_id"

job_field() {  # job_field FIELD → the field of `fsdpctl status --json` (states without prefix)
  "$fsdpctl" status "$job_id" --json | python3 -c "
import json, sys
value = json.load(sys.stdin).get('$1', '')
if '$1' == 'state':
    value = str(value).upper().replace('JOB_STATE_', '')
elif '$1' == 'step':
    value = int(float(value or 0))
print(value)"
}
past_profile_window() {
  local state step
  state=$(job_field state)
  case "$state" in
    FAILED | CANCELLED | SUCCEEDED)
      echo "FAIL: job $job_id ended as $state: $(job_field reason)" >&2
      exit 1
      ;;
  esac
  step=$(job_field step)
  [ "$state" = RUNNING ] && [ "${step:-0}" -gt $((profile_start + profile_steps + 2)) ]
}
wait_until 180 "job $job_id to train past its profiling window" past_profile_window
# Rate windows need several scrapes of a running job, and the RPC latency panels calls spread
# over them (a histogram's first observation creates its series, which rate() cannot see
# rise): a client that polls the job and opens watch streams (time to first message).
for _ in $(seq 8); do
  "$fsdpctl" status "$job_id" >/dev/null
  timeout 1 "$fsdpctl" watch "$job_id" >/dev/null 2>&1 || true
  sleep 0.5
done

python3 "$script_dir/dashboard_queries.py" "$source_dir/deploy/grafana/fsdpd.json" \
  --job "$job_id" --rate-interval 10s --range 10m >"$work/queries.json"

check_panels() {  # check_panels PHASE: every panel has data within 30 s, or the test fails
  local deadline=$((SECONDS + 30))
  until python3 "$panels_tool" panels "$prometheus_url" "$work/queries.json" \
    --spec "$work/job.yaml" >"$work/report.txt" 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      cat "$work/report.txt"
      echo "---- fsdpd's /metrics now (families) ----"
      curl -s "http://127.0.0.1:$metrics_port/metrics" | grep '^# TYPE' || true
      echo "FAIL: dashboard panels without data $1 (see above)" >&2
      exit 1
    fi
    sleep 2
  done
  echo "== panels $1"
  cat "$work/report.txt"
}
check_panels "while the job trains"

# Every alert of the shipped file loaded on the real server.
loaded_rules=$(curl -sf "$prometheus_url/api/v1/rules" | python3 -c '
import json, sys
print(sum(len(g["rules"]) for g in json.load(sys.stdin)["data"]["groups"]))')
expected_rules=$(grep -c '^      - alert:' "$rules")
if [ "$loaded_rules" -ne "$expected_rules" ]; then
  echo "FAIL: Prometheus loaded $loaded_rules rules of $rules, the file has $expected_rules" >&2
  exit 1
fi

# The $job variable lists the job from fsdpd_job_info.
python3 "$panels_tool" label-values "$prometheus_url" fsdpd_job_info job "$job_id" >/dev/null || {
  echo "FAIL: label_values(fsdpd_job_info, job) does not list $job_id" >&2
  exit 1
}

# The roofline of the profiled window: one mark per kernel of the table that has a cost.
"$fsdpctl" profile "$job_id" --roofline "$work/roofline.svg" --json >"$work/profile.json"
python3 - "$work/roofline.svg" "$work/profile.json" <<'PYTHON'
import json
import sys
import xml.etree.ElementTree as ElementTree

svg = ElementTree.parse(sys.argv[1]).getroot()
namespace = "{http://www.w3.org/2000/svg}"
assert svg.tag == namespace + "svg", svg.tag
marks = [c for c in svg.iter(namespace + "circle") if c.get("class") == "kernel"]
kernels = json.load(open(sys.argv[2]))["kernels"]
placed = [k for k in kernels if k["flops"] > 0 and k["bytes"] > 0 and k["total_seconds"] > 0]
if not placed:
    sys.exit("FAIL: the profile has no kernel with a FLOP and byte cost")
names = sorted(m.get("data-kernel") for m in marks)
if names != sorted(k["name"] for k in placed):
    sys.exit(f"FAIL: roofline marks {names} are not the table's kernels with a cost")
texts = "".join(svg.itertext())
if "Analytic estimate" not in texts:
    sys.exit("FAIL: a CPU roofline is not labelled as an analytic estimate")
print(f"roofline: {len(marks)} marks for {len(kernels)} kernels ({len(placed)} with a cost)")
PYTHON

# A worker dies: the job fails (no restarts) and the worker is LOST.
kill -KILL "${worker_pids[1]}"
job_failed() { [ "$(job_field state)" = FAILED ]; }
wait_until 60 "job $job_id to fail after its worker was killed" job_failed
a_lost_worker() { [ "$(count_workers LOST)" -ge 1 ]; }
wait_until 30 "a LOST worker" a_lost_worker
lost_worker=$(workers_json | python3 -c '
import json, sys
print([w for w in json.load(sys.stdin) if str(w.get("state", "")).upper().endswith("LOST")][0]["id"])')
for alert in FsdpdJobFailed FsdpdWorkerLost; do
  wait_until 60 "$alert to fire" python3 "$panels_tool" alert "$prometheus_url" "$alert" firing
  echo "alert $alert fired"
done

# The worker comes back on the same host and device and takes back its old id: two workers,
# both idle, one of them the lost id, and none LOST.
start_worker 1
lost_id_back() {
  workers_json | python3 -c '
import json, sys
workers = json.load(sys.stdin)
states = {w["id"]: str(w.get("state", "")).upper() for w in workers}
sys.exit(0 if len(workers) == 2 and states.get(sys.argv[1], "").endswith("IDLE") and
         all(s.endswith("IDLE") for s in states.values()) else 1)' "$lost_worker"
}
if ! wait_until 60 "the restarted worker to take back the id $lost_worker" lost_id_back; then
  workers_json >&2
  exit 1
fi
for alert in FsdpdWorkerLost FsdpdJobFailed; do
  wait_until 90 "$alert to resolve" python3 "$panels_tool" alert "$prometheus_url" "$alert" inactive
  echo "alert $alert resolved"
done

# The finished job's series leave /metrics after the retention (what the stall alert relies
# on), and the dashboard still shows the job.
finished_job_series_gone() {
  ! curl -sf "http://127.0.0.1:$metrics_port/metrics" | grep -q "job=\"$job_id\""
}
wait_until 30 "the series of job $job_id to leave /metrics" finished_job_series_gone
# The next scrape without them marks them stale: an instant query finds none of the job's series.
wait_until 30 "Prometheus to mark the series of job $job_id stale" \
  python3 "$panels_tool" absent "$prometheus_url" "{job=\"$job_id\"}"
check_panels "after the job ended and its series left /metrics"
job_id=
echo "dashboard: every panel has data from a live fsdpd, during the job and after it"
