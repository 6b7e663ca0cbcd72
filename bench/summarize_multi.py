#!/usr/bin/env python3
"""Summarises bench/gpu_multi.sh: the seed workload at several world sizes beside the anchor.

Inputs (each repeatable, keyed by world size N):
  --fsdpd N=WATCH            `fsdpctl --json watch` of the run on N GPUs
  --fsdpd-memory N=CSV       nvidia-smi samples "index, MiB" of every GPU during that run
  --anchor MODE:N=LOG        the anchor's log (its RESULT line), MODE eager or compile
  --anchor-memory MODE:N=CSV samples during that anchor run
  --kill-straight FILE --kill-killed FILE   `fsdpctl --json status` of the uninterrupted and
                             the killed-and-resumed runs
  --first N --last M         counted steps (default 11..last): the first ten warm up

Per size: median tokens/s (whole job and per GPU), scaling efficiency = per-GPU tokens/s at N ÷
at 1, median exposed communication per step, peak driver memory of the busiest GPU, and
fsdpd ÷ anchor ratios (above 1 is faster; below 1 is leaner).
"""
import argparse
import collections
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from summarize_watch import cell, ratio, read_anchor, read_steps  # noqa: E402

MIB = 1048576


def keyed(items):
    out = {}
    for item in items:
        key, _, path = item.partition("=")
        out[key] = path
    return out


def busiest_gpu_mib(path):
    """The largest memory.used of any one GPU over the samples, in MiB."""
    peak = collections.defaultdict(float)
    try:
        with open(path) as handle:
            for line in handle:
                parts = [p.strip() for p in line.split(",")]
                if len(parts) == 2 and parts[0].isdigit():
                    try:
                        peak[parts[0]] = max(peak[parts[0]], float(parts[1]))
                    except ValueError:
                        continue
    except (OSError, TypeError):
        return None
    return max(peak.values()) if peak else None


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fsdpd", action="append", default=[])
    parser.add_argument("--fsdpd-memory", action="append", default=[])
    parser.add_argument("--anchor", action="append", default=[])
    parser.add_argument("--anchor-memory", action="append", default=[])
    parser.add_argument("--kill-straight")
    parser.add_argument("--kill-killed")
    parser.add_argument("--first", type=int, default=11)
    parser.add_argument("--last", type=int, default=10**9)
    parser.add_argument("--json")
    args = parser.parse_args()

    watches, memories = keyed(args.fsdpd), keyed(args.fsdpd_memory)
    anchors, anchor_memories = keyed(args.anchor), keyed(args.anchor_memory)
    rows = []
    for world in sorted(watches, key=int):
        row = {"world": int(world)}
        try:
            _, counted = read_steps(watches[world], args.first, args.last)
        except OSError:
            counted = []
        if counted:
            row["tokens_per_s"] = statistics.median(e["tokens_per_second"] for e in counted)
            row["tokens_per_s_per_gpu"] = row["tokens_per_s"] / row["world"]
            row["exposed_comm_ms"] = statistics.median(
                e.get("exposed_comm_seconds", 0) for e in counted) * 1e3
            row["step_ms"] = statistics.median(e["step_seconds"] for e in counted) * 1e3
        peak = busiest_gpu_mib(memories.get(world))
        row["peak_gpu_mib"] = peak
        for mode in ("eager", "compile"):
            key = f"{mode}:{world}"
            result = read_anchor(anchors[key]) if key in anchors else {}
            if "tokens_per_s" in result:
                row[f"{mode}_tokens_per_s"] = float(result["tokens_per_s"])
                row[f"{mode}_peak_gpu_mib"] = busiest_gpu_mib(anchor_memories.get(key))
                row[f"speed_vs_{mode}"] = ratio(row.get("tokens_per_s"),
                                                row[f"{mode}_tokens_per_s"])
                row[f"memory_vs_{mode}"] = ratio(peak, row[f"{mode}_peak_gpu_mib"])
        rows.append(row)
    base = next((r for r in rows if r["world"] == 1 and "tokens_per_s_per_gpu" in r), None)
    for row in rows:
        if base is not None and "tokens_per_s_per_gpu" in row:
            row["scaling_efficiency"] = row["tokens_per_s_per_gpu"] / base["tokens_per_s_per_gpu"]

    columns = [("world", "N"), ("tokens_per_s", "tok/s"), ("tokens_per_s_per_gpu", "tok/s/GPU"),
               ("scaling_efficiency", "scaling"), ("exposed_comm_ms", "exposed ms"),
               ("peak_gpu_mib", "peak MiB/GPU"), ("compile_tokens_per_s", "compile tok/s"),
               ("speed_vs_compile", "× compile"), ("memory_vs_compile", "mem ÷ compile"),
               ("speed_vs_eager", "× eager")]
    print(" | ".join(title for _, title in columns))
    for row in rows:
        print(" | ".join(cell(row.get(key)) for key, _ in columns))

    kill = {}
    if args.kill_straight and args.kill_killed:
        for name, path in (("straight", args.kill_straight), ("killed", args.kill_killed)):
            try:
                with open(path) as handle:
                    kill[name] = json.load(handle)
            except (OSError, ValueError) as error:
                kill[name] = {"error": str(error)}
        straight, killed = kill["straight"], kill["killed"]
        print(f"kill -9 test: straight {straight.get('state')} loss {straight.get('loss')}; "
              f"killed {killed.get('state')} attempt {killed.get('attempt')} loss "
              f"{killed.get('loss')}; reason {killed.get('reason', '')!r}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"rows": rows, "kill": kill}, handle, indent=2)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
