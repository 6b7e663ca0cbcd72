#!/usr/bin/env python3
"""Where the compute stream sits idle inside profiled steps, from `fsdpctl trace JOB -o F`.

    python3 bench/trace_gaps.py TRACE.json

Every gap between two consecutive compute-stream kernels is put in one class:
- "behind a comm-stream kernel": a kernel of the comm stream covers most of the gap (the
  compute kernel queued next could not get SMs while it ran);
- "launch spacing": under 5 us, the launch-to-launch floor;
- "host": otherwise, the host had not queued the next kernel yet (syncs, host work).
Figures are per profiled step (the trace's "step N" ranges).
"""
import collections
import json
import re
import sys

LAUNCH_SPACING_US = 5


def short_name(kernel: str) -> str:
    """`void ns::(anonymous namespace)::CastKernel<float>(...)` -> `CastKernel`."""
    name = kernel.removeprefix("void ").replace("(anonymous namespace)::", "")
    for stop in ("(", "<"):
        name = name.split(stop)[0]
    return name.split("::")[-1][:48]


def analyse(events: list) -> dict:
    """The trace's per-step figures: step, compute and comm kernel ms, and idle ms and gap
    counts per cause (dicts keyed by the cause's text). Raises ValueError on a trace without
    compute-stream kernels or step ranges."""
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    stream_tid = {name: tid for tid, name in names.items()}
    kernels = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "comm")),
                     key=lambda e: e["ts"])
    compute = [e for e in kernels if e["tid"] == stream_tid.get("compute stream")]
    comm = [e for e in kernels if e["tid"] == stream_tid.get("comm stream")]
    steps = [e for e in events
             if e.get("cat") == "range" and re.fullmatch(r"step \d+", e["name"])]
    if not compute or not steps:
        raise ValueError("no compute-stream kernels or no step ranges in the trace")
    per_step = len(steps)
    idle = collections.Counter()
    gaps = collections.Counter()
    for before, after in zip(compute, compute[1:]):
        start, end = before["ts"] + before["dur"], after["ts"]
        gap = end - start
        if gap <= 0:
            continue
        covering = [c for c in comm if c["ts"] < end and c["ts"] + c["dur"] > start]
        covered = sum(min(end, c["ts"] + c["dur"]) - max(start, c["ts"]) for c in covering)
        if covered > 0.5 * gap:
            cause = "behind a comm-stream kernel: " + short_name(covering[0]["name"])
        elif gap < LAUNCH_SPACING_US:
            cause = f"launch spacing (< {LAUNCH_SPACING_US} us)"
        else:
            cause = "host: before " + short_name(after["name"])
        idle[cause] += gap
        gaps[cause] += 1
    return {
        "steps": per_step,
        "step_ms": sum(s["dur"] for s in steps) / per_step / 1000,
        "compute_ms": sum(k["dur"] for k in compute) / per_step / 1000,
        "comm_ms": sum(k["dur"] for k in comm) / per_step / 1000,
        "idle_ms": {cause: micros / per_step / 1000 for cause, micros in idle.items()},
        "gaps": {cause: count / per_step for cause, count in gaps.items()},
    }


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        with open(sys.argv[1], encoding="utf-8") as handle:
            trace = json.load(handle)
        figures = analyse(trace["traceEvents"] if isinstance(trace, dict) else trace)
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"trace_gaps: cannot analyse {sys.argv[1]}: {error}", file=sys.stderr)
        return 1
    print(f"{figures['steps']} profiled steps: step {figures['step_ms']:.2f} ms, compute-stream "
          f"kernels {figures['compute_ms']:.2f} ms, comm-stream kernels {figures['comm_ms']:.2f} ms "
          f"(per step)")
    print(f"{'idle ms/step':>12} {'gaps/step':>9}  cause")
    ranked = sorted(figures["idle_ms"].items(), key=lambda item: -item[1])
    for cause, milliseconds in ranked[:12]:
        print(f"{milliseconds:12.2f} {figures['gaps'][cause]:9.1f}  {cause}")
    print(f"{sum(figures['idle_ms'].values()):12.2f} {'':9}  all gaps between compute kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
