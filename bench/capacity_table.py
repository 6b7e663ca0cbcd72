#!/usr/bin/env python3
"""The capacity table from bench/gpu_capacity.sh's trials.tsv.

For each runner: the largest number of layers that trained, its parameters, tokens/s and
driver-peak memory, and the smallest larger number that failed with why. A trial stopped by
its time limit says nothing about memory: it is listed as undecided, never as the boundary.
Then fsdpd's parameters over each other runner's. A runner with no failure above its largest
success has no boundary: its row says so, since the search ran out of trials or time before
finding it.

    python3 bench/capacity_table.py OUT/capacity/trials.tsv
"""
import csv
import sys


def boundaries(rows):
    by_runner = {}
    for row in rows:
        by_runner.setdefault(row["runner"], []).append(row)
    result = {}
    for runner, trials in by_runner.items():
        ok = [t for t in trials if t["ok"] == "1"]
        best = max(ok, key=lambda t: int(t["layers"])) if ok else None
        floor = int(best["layers"]) if best else 0
        above = [t for t in trials if t["ok"] != "1" and int(t["layers"]) > floor]
        failed = [t for t in above if "time_limit" not in t["why"]]
        undecided = [t for t in above if "time_limit" in t["why"]]
        first_failed = min(failed, key=lambda t: int(t["layers"])) if failed else None
        first_undecided = min(undecided, key=lambda t: int(t["layers"])) if undecided else None
        result[runner] = (best, first_failed, first_undecided, len(trials))
    return result


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: capacity_table.py TRIALS.tsv")
    with open(sys.argv[1]) as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    if not rows:
        sys.exit(f"capacity_table: no trials in {sys.argv[1]}")
    table = boundaries(rows)
    print("| runner | largest N that trained | parameters | tokens/s | driver peak GiB "
          "| host peak GB | first N that failed | trials |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    for runner, (best, failed, undecided, count) in table.items():
        if best is None:
            shown = failed or undecided
            print(f"| {runner} | none | | | | | {shown['layers']} ({shown['why']}) | {count} |")
            continue
        peak = best["driver_peak_mib"]
        peak_text = f"{int(peak) / 1024:.1f}" if peak not in ("-", "") else "-"
        failed_text = f"{failed['layers']} ({failed['why']})" if failed else "not found"
        if undecided and (not failed or int(undecided["layers"]) < int(failed["layers"])):
            failed_text += f"; {undecided['layers']} undecided (time limit)"
        print(f"| {runner} | {best['layers']} | {int(best['params']) / 1e9:.2f}B "
              f"| {best['tokens_per_s']} | {peak_text} | {best['host_peak_gb']} "
              f"| {failed_text} | {count} |")
    fsdpd = table.get("fsdpd", (None,))[0]
    for runner, (best, failed, _, _) in table.items():
        if runner == "fsdpd" or fsdpd is None or best is None:
            continue
        bounded = "" if failed else " (its boundary was not reached: fsdpd trains at most that)"
        ratio = int(fsdpd["params"]) / int(best["params"])
        print(f"\nfsdpd / {runner}: {ratio:.2f}x the parameters{bounded}")


if __name__ == "__main__":
    main()
