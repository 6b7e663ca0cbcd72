#!/usr/bin/env bash
# Integration: every PromQL query of deploy/grafana/fsdpd.json returns data from a real
# Prometheus scraping a real fsdpd while a CPU job trains on two fsdpd-workers.
#
# Starts, all on loopback ports chosen at random: fsdpd, two `fsdpd-worker --device cpu`, and
# `prometheus` (scraping every second, loading deploy/prometheus/rules). Submits a tiny job with
# a profiling window, waits until it has trained past the window, then queries each panel with
# /api/v1/query. A panel with no series fails the test, except the kernel throughput panels
# (SM %, HBM %, verdicts) when the backend reports no hardware counters: those are listed as
# skipped, with the reason. Finally cancels the job, checks that the state panels see it and
# that the job's per-job series end with it (what the stall alert relies on).
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

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}
grpc_port=$(free_port)
metrics_port=$(free_port)
prometheus_port=$(free_port)
export FSDPD_COORDINATOR=127.0.0.1:$grpc_port

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

# A short metrics retention, so the cancelled job's series are seen to go at the end (the
# default keeps them five minutes).
"$fsdpd" --listen "127.0.0.1:$grpc_port" --metrics-listen "127.0.0.1:$metrics_port" \
  --state-dir "$work/state" --heartbeat-timeout 10s --metrics-retention 3s \
  >"$work/fsdpd.log" 2>&1 &
pids+=($!)
wait_until 30 "fsdpd's /metrics" curl -sf "http://127.0.0.1:$metrics_port/metrics"

for rank in 0 1; do
  "$worker" --coordinator "127.0.0.1:$grpc_port" --device cpu \
    --checkpoint-root "$work/checkpoints" --heartbeat-interval 500ms \
    >"$work/worker-$rank.log" 2>&1 &
  pids+=($!)
done
two_idle_workers() {
  "$fsdpctl" workers --json >"$work/workers.json" &&
    python3 -c '
import json, sys
text = open(sys.argv[1]).read()
try:
    workers = json.loads(text)
except json.JSONDecodeError:  # one object per line
    workers = [json.loads(line) for line in text.splitlines() if line.strip()]
if isinstance(workers, dict):
    workers = workers.get("workers", [])
idle = [w for w in workers if str(w.get("state", "")).upper().endswith("IDLE")]
sys.exit(0 if len(idle) >= 2 else 1)
' "$work/workers.json"
}
wait_until 60 "two idle workers" two_idle_workers

# Rules are loaded from the repository, so a real server also accepts them.
cat >"$work/prometheus.yml" <<CONFIG
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $source_dir/deploy/prometheus/rules/fsdpd.rules.yml
scrape_configs:
  - job_name: fsdpd
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:$metrics_port"]
CONFIG
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prometheus_port" --log.level=warn >"$work/prometheus.log" 2>&1 &
pids+=($!)
prometheus_url=http://127.0.0.1:$prometheus_port
wait_until 60 "Prometheus to be ready" curl -sf "$prometheus_url/-/ready"

# Tiny, and long enough to be still RUNNING while the panels are queried; cancelled at the end.
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
# Rate windows need several scrapes of a running job.
sleep 12

python3 "$script_dir/dashboard_queries.py" "$source_dir/deploy/grafana/fsdpd.json" \
  --job "$job_id" --rate-interval 10s --range 10m >"$work/queries.json"

query_panels() {  # query_panels → 0 when every required panel has data; prints a report
  python3 - "$prometheus_url" "$work/queries.json" <<'PYTHON'
import json
import sys
import urllib.parse
import urllib.request

url, queries_path = sys.argv[1], sys.argv[2]


def query(expr):
    data = urllib.parse.urlencode({"query": expr}).encode()
    with urllib.request.urlopen(f"{url}/api/v1/query", data, timeout=10) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise RuntimeError(body.get("error", body))
    return body["data"]["result"]


has_counters = bool(query("fsdpd_kernel_sm_throughput_ratio >= 0 or "
                          "fsdpd_kernel_dram_throughput_ratio >= 0"))
missing = []
for entry in json.load(open(queries_path)):
    name = f'{entry["panel"]} [{entry["ref"]}]'
    try:
        result = query(entry["expr"])
    except Exception as error:  # a query Prometheus rejects is a failure, not a skip
        print(f"FAIL  {name}: {error}")
        missing.append(name)
        continue
    if result:
        print(f"ok    {name}: {len(result)} series")
    elif entry["requires"] == "counters" and not has_counters:
        print(f"SKIP  {name}: the backend reported no SM/DRAM throughput counters")
    else:
        print(f"EMPTY {name}: {entry['expr']}")
        missing.append(name)
sys.exit(1 if missing else 0)
PYTHON
}

# Series appear one scrape after the coordinator updates them; give them a few more seconds.
deadline=$((SECONDS + 30))
until query_panels >"$work/report.txt" 2>&1; do
  if [ $SECONDS -ge $deadline ]; then
    cat "$work/report.txt"
    echo "FAIL: dashboard panels without data (see above)" >&2
    exit 1
  fi
  sleep 2
done
cat "$work/report.txt"

# The alert rules loaded on the real server.
rules=$(curl -sf "$prometheus_url/api/v1/rules" | python3 -c '
import json, sys
print(sum(len(g["rules"]) for g in json.load(sys.stdin)["data"]["groups"]))')
expected_rules=$(grep -c '^      - alert:' "$source_dir/deploy/prometheus/rules/fsdpd.rules.yml")
if [ "$rules" -ne "$expected_rules" ]; then
  echo "FAIL: Prometheus loaded $rules rules, the file has $expected_rules" >&2
  exit 1
fi

# Cancelling shows up on the jobs-by-state panel.
"$fsdpctl" cancel "$job_id" >/dev/null
cancelled_job_counted() {
  curl -sf "$prometheus_url/api/v1/query" \
    --data-urlencode 'query=sum(fsdpd_jobs{state="CANCELLED"}) >= 1' |
    python3 -c 'import json, sys; sys.exit(0 if json.load(sys.stdin)["data"]["result"] else 1)'
}
wait_until 30 "fsdpd_jobs{state=\"CANCELLED\"} to count the cancelled job" cancelled_job_counted
# FsdpdTrainingStalled tells finished jobs from stalled ones by their per-job series going
# away when the job ends, so the exporter must drop them.
finished_job_series_gone() {
  curl -sf "$prometheus_url/api/v1/query" \
    --data-urlencode "query=fsdpd_train_step{job=\"$job_id\"}" |
    python3 -c 'import json, sys; sys.exit(1 if json.load(sys.stdin)["data"]["result"] else 0)'
}
wait_until 30 "fsdpd_train_step{job=\"$job_id\"} to go away after the job ended" \
  finished_job_series_gone
job_id=
echo "dashboard: every panel has data from a live fsdpd"
