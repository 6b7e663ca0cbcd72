#!/usr/bin/env python3
"""Asks a live Prometheus what the fsdpd dashboard and alerts would show.

  prometheus_panels.py panels URL QUERIES_JSON --spec JOB_YAML [--window SECONDS]
      Runs every query of dashboard_queries.py's output the way Grafana does: instant panels
      at now, the others as range queries over the last --window seconds. Exits 0 when every
      query has data; prints one line per query. Kernel queries (requires "profile" or
      "counters") are skipped, with the reason, only when the job's spec (JOB_YAML) runs no
      profiling window, and validation queries (requires "validation") only when it sets no
      data.eval_every: what is expected comes from the spec, never from the metrics
      themselves, so a renamed or lost metric is a failure, not a skip.
  prometheus_panels.py absent URL EXPR
      Exits 0 when the instant query EXPR has no series at now (for example once Prometheus
      marked a finished job's series stale).
  prometheus_panels.py alert URL NAME firing|inactive
      Exits 0 when alert NAME is firing (at least one instance) or, for inactive, has none
      pending or firing. Prints the alert's instances.
  prometheus_panels.py label-values URL METRIC LABEL VALUE
      Exits 0 when VALUE is among METRIC's LABEL values over the last hour (what Grafana's
      label_values(METRIC, LABEL) variable lists).
"""
import argparse
import json
import sys
import time
import urllib.parse
import urllib.request

import yaml


def api(url, path, parameters):
    # GET: the label values endpoint takes no POST.
    query = urllib.parse.urlencode(parameters, doseq=True)
    with urllib.request.urlopen(f"{url}/api/v1/{path}?{query}", timeout=10) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise RuntimeError(body.get("error", body))
    return body["data"]


def has_data(url, expr, instant, window):
    now = time.time()
    if instant:
        return len(api(url, "query", {"query": expr, "time": now})["result"])
    result = api(url, "query_range", {"query": expr, "start": now - window, "end": now,
                                      "step": 1})["result"]
    return sum(1 for series in result if series.get("values"))


def profiled(spec):
    """Whether the job runs a profiling window: `profile.steps`, 3 when unset (the default of
    proto/spec/job_spec.cc). Its ranks then report the kernel table, whose rows carry SM and
    HBM throughput ratios on every backend: CUPTI's counters where `counters: true` can read
    them, the analytic roofline otherwise (docs/profiling.md)."""
    profile = spec.get("profile") or {}
    return int(profile.get("steps", 3)) > 0


def validated(spec):
    """Whether the job reports a validation loss: `data.eval_every` above 0 (off by default)."""
    data = spec.get("data") or {}
    return int(data.get("eval_every", 0)) > 0


def panels(args):
    with open(args.queries, encoding="utf-8") as file:
        queries = json.load(file)
    with open(args.spec, encoding="utf-8") as file:
        spec = yaml.safe_load(file) or {}
    kernels_expected, validation_expected = profiled(spec), validated(spec)
    missing = []
    for entry in queries:
        name = f'{entry["panel"]} [{entry["ref"]}]'
        kind = "instant" if entry["instant"] else "range"
        try:
            count = has_data(args.url, entry["expr"], entry["instant"], args.window)
        except Exception as error:  # a query Prometheus rejects is a failure, not a skip
            print(f"FAIL  {name}: {error}")
            missing.append(name)
            continue
        if count:
            print(f"ok    {name} ({kind}): {count} series")
        elif entry["requires"] in ("profile", "counters") and not kernels_expected:
            print(f"SKIP  {name}: the job's spec runs no profiling window (profile.steps: 0)")
        elif entry["requires"] == "validation" and not validation_expected:
            print(f"SKIP  {name}: the job's spec runs no validation (no data.eval_every)")
        else:
            print(f"EMPTY {name} ({kind}): {entry['expr']}")
            missing.append(name)
    return 1 if missing else 0


def alert(args):
    alerts = [a for a in api(args.url, "query", {"query": "ALERTS"})["result"]
              if a["metric"].get("alertname") == args.name]
    for entry in alerts:
        print(json.dumps(entry["metric"], sort_keys=True))
    states = {a["metric"].get("alertstate") for a in alerts}
    if args.state == "firing":
        return 0 if "firing" in states else 1
    return 0 if not alerts else 1


def absent(args):
    result = api(args.url, "query", {"query": args.expr, "time": time.time()})["result"]
    for series in result:
        print(json.dumps(series["metric"], sort_keys=True))
    return 1 if result else 0


def label_values(args):
    now = time.time()
    values = api(args.url, f"label/{args.label}/values",
                 {"match[]": args.metric, "start": now - 3600, "end": now})
    print(" ".join(values))
    return 0 if args.value in values else 1


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("panels")
    p.add_argument("url")
    p.add_argument("queries")
    p.add_argument("--spec", required=True, help="the job's spec (YAML)")
    p.add_argument("--window", type=int, default=600)
    p.set_defaults(run=panels)
    p = commands.add_parser("absent")
    p.add_argument("url")
    p.add_argument("expr")
    p.set_defaults(run=absent)
    p = commands.add_parser("alert")
    p.add_argument("url")
    p.add_argument("name")
    p.add_argument("state", choices=("firing", "inactive"))
    p.set_defaults(run=alert)
    p = commands.add_parser("label-values")
    for name in ("url", "metric", "label", "value"):
        p.add_argument(name)
    p.set_defaults(run=label_values)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
