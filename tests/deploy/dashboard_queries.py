#!/usr/bin/env python3
"""Extracts every PromQL query of the fsdpd Grafana dashboard, ready to send to Prometheus.

Grafana variables are replaced so that each query runs as it is: `$job` becomes a regex
matcher (every job by default), `$__rate_interval`, `$__interval` and `$__range` become fixed
windows. A panel without a query, or a query naming a variable this script does not know, is
an error: the dashboard would show nothing there.

Output (JSON, one list): [{"panel", "ref", "expr", "instant", "requires"}], where `requires`
is null, "profile" (kernel series that exist only once a profiling window has run) or
"counters" (kernel throughput ratios: CUPTI's hardware counters where a job asks for them and
they can be read, the analytic roofline otherwise).

  dashboard_queries.py deploy/grafana/fsdpd.json [--job REGEX] [--rate-interval 30s]
"""
import argparse
import json
import re
import sys

KNOWN_VARIABLES = ("$job", "$__rate_interval", "$__interval", "$__range")
COUNTER_METRICS = ("fsdpd_kernel_sm_throughput_ratio", "fsdpd_kernel_dram_throughput_ratio")
PROFILE_METRICS = ("fsdpd_kernel_",)
VALIDATION_METRICS = ("fsdpd_job_eval_loss",)


class DashboardError(Exception):
    pass


def iterate_panels(panels):
    for panel in panels:
        yield panel
        # Collapsed rows keep their panels inside the row.
        yield from iterate_panels(panel.get("panels", []))


def requirement(expr):
    if any(name in expr for name in COUNTER_METRICS):
        return "counters"
    if any(name in expr for name in PROFILE_METRICS):
        return "profile"
    if any(name in expr for name in VALIDATION_METRICS):
        return "validation"
    return None


def substitute(expr, job_regex, rate_interval, range_window):
    # A job selection is a regex alternation in Grafana; the caller's regex stands in for it.
    escaped_job = job_regex.replace("\\", "\\\\").replace('"', '\\"')
    expr = expr.replace('=~"$job"', f'=~"{escaped_job}"')
    expr = expr.replace('=~"${job}"', f'=~"{escaped_job}"')
    expr = expr.replace("$__rate_interval", rate_interval)
    expr = expr.replace("$__interval", rate_interval)
    expr = expr.replace("$__range", range_window)
    return expr


def extract(dashboard, job_regex=".+", rate_interval="30s", range_window="1h"):
    if not isinstance(dashboard.get("panels"), list) or not dashboard["panels"]:
        raise DashboardError("dashboard has no panels")
    queries = []
    for panel in iterate_panels(dashboard["panels"]):
        if panel.get("type") == "row":
            continue
        title = panel.get("title") or f"panel id {panel.get('id')}"
        targets = [t for t in panel.get("targets", []) if not t.get("hide")]
        if not targets:
            raise DashboardError(f'panel "{title}" has no query')
        for target in targets:
            expr = (target.get("expr") or "").strip()
            ref = target.get("refId", "?")
            if not expr:
                raise DashboardError(f'panel "{title}" query {ref} has an empty expression')
            resolved = substitute(expr, job_regex, rate_interval, range_window)
            leftover = re.findall(r"\$\{?\w+\}?", resolved)
            if leftover:
                raise DashboardError(
                    f'panel "{title}" query {ref} uses {", ".join(sorted(set(leftover)))}, '
                    f"which is not one of {', '.join(KNOWN_VARIABLES)} as a regex matcher")
            queries.append({
                "panel": title,
                "ref": ref,
                "expr": resolved,
                "instant": bool(target.get("instant")) and not target.get("range", False),
                "requires": requirement(expr),
            })
    return queries


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dashboard", help="path of the Grafana dashboard JSON")
    parser.add_argument("--job", default=".+", help="regex that $job is replaced with")
    parser.add_argument("--rate-interval", default="30s",
                        help="window for $__rate_interval and $__interval")
    parser.add_argument("--range", default="1h", dest="range_window",
                        help="window for $__range")
    args = parser.parse_args(argv)
    try:
        with open(args.dashboard, encoding="utf-8") as file:
            dashboard = json.load(file)
    except (OSError, json.JSONDecodeError) as error:
        print(f"dashboard_queries: {args.dashboard}: {error}", file=sys.stderr)
        return 2
    try:
        queries = extract(dashboard, args.job, args.rate_interval, args.range_window)
    except DashboardError as error:
        print(f"dashboard_queries: {args.dashboard}: {error}", file=sys.stderr)
        return 1
    json.dump(queries, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
