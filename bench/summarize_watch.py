#!/usr/bin/env python3
"""Summarises one GPU seed benchmark run (bench/gpu_seed.sh) into one table.

Inputs:
  --watch FILE        `fsdpctl --json watch JOB` output (or fsdpd-train's JSON step lines)
  --first N --last M  the steps that count (default 11..40: the first ten warm up)
  --driver-samples F  nvidia-smi samples taken during the fsdpd run: memory.used in MiB, then
                      (optional) SM clock, power and utilisation, for the busy-clock line
  --anchor NAME=LOG   the seed script's log (its RESULT line); repeatable
  --anchor-driver-samples NAME=F  nvidia-smi samples taken during that anchor run
  --json FILE         also write the figures as JSON

Throughput is the median over the counted steps of tokens/s, step time the median step
duration; memory is the allocator's peak (fsdpd: memory_peak_bytes; PyTorch:
max_memory_allocated) and the driver's view (peak of nvidia-smi's memory.used while the run was
alive; PyTorch's RESULT line also gives cudaMemGetInfo's used bytes at the end). Ratios are
fsdpd ÷ anchor: above 1 is faster for throughput, below 1 is leaner for memory.
"""
import argparse
import json
import statistics
import sys

GB = 1e9


def read_steps(path, first, last):
    steps = {}
    with open(path) as handle:
        for line in handle:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("type", "step") != "step" or "step" not in event:
                continue
            steps[int(event["step"])] = event  # a restart replays steps; the last report wins
    counted = [steps[s] for s in sorted(steps) if first <= s <= last]
    return steps, counted


def peak_sample_mib(path):
    if not path:
        return None
    values = []
    try:
        with open(path) as handle:
            for line in handle:
                line = line.strip().split(",")[0].strip()
                if line.replace(".", "", 1).isdigit():
                    values.append(float(line))
    except OSError:
        return None
    return max(values) if values else None


def busy_clocks(path):
    """Median SM clock (MHz) and board power (W) over the samples with the GPU ≥ 90% busy."""
    clocks, watts = [], []
    try:
        with open(path) as handle:
            for line in handle:
                fields = [field.strip() for field in line.split(",")]
                if len(fields) < 4:
                    continue
                try:
                    clock, power, busy = float(fields[1]), float(fields[2]), float(fields[3])
                except ValueError:
                    continue
                if busy >= 90:
                    clocks.append(clock)
                    watts.append(power)
    except (OSError, TypeError):
        return None
    return (statistics.median(clocks), statistics.median(watts), len(clocks)) if clocks else None


def read_anchor(path):
    result = {}
    try:
        with open(path) as handle:
            for line in handle:
                if line.startswith("RESULT"):
                    for field in line.split()[1:]:
                        key, _, value = field.partition("=")
                        result[key] = value
    except OSError:
        pass
    return result


def ratio(numerator, denominator):
    if numerator is None or denominator in (None, 0):
        return None
    return numerator / denominator


def cell(value, digits=2):
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--watch", required=True)
    parser.add_argument("--first", type=int, default=11)
    parser.add_argument("--last", type=int, default=40)
    parser.add_argument("--driver-samples")
    parser.add_argument("--anchor", action="append", default=[])
    parser.add_argument("--anchor-driver-samples", action="append", default=[])
    parser.add_argument("--json")
    args = parser.parse_args()

    rows = []
    try:
        all_steps, counted = read_steps(args.watch, args.first, args.last)
    except OSError as error:
        print(f"summarize_watch: cannot read {args.watch}: {error}", file=sys.stderr)
        all_steps, counted = {}, []
    fsdpd = {"name": "fsdpd", "steps": len(counted)}
    if counted:
        fsdpd["tokens_per_s"] = statistics.median(e["tokens_per_second"] for e in counted)
        fsdpd["step_ms"] = statistics.median(e["step_seconds"] for e in counted) * 1e3
        fsdpd["alloc_peak_gb"] = max(e.get("memory_peak_bytes", 0) for e in all_steps.values()) / GB
        fsdpd["first_loss"] = all_steps[min(all_steps)]["loss"]
        fsdpd["last_loss"] = all_steps[max(all_steps)]["loss"]
        if "mfu_ratio" in counted[0]:
            fsdpd["mfu"] = statistics.median(e["mfu_ratio"] for e in counted)
    driver = peak_sample_mib(args.driver_samples)
    fsdpd["driver_peak_gb"] = driver * 1048576 / GB if driver is not None else None
    fsdpd["busy_clocks"] = busy_clocks(args.driver_samples)
    rows.append(fsdpd)

    anchor_samples = dict(item.split("=", 1) for item in args.anchor_driver_samples)
    for item in args.anchor:
        name, _, path = item.partition("=")
        result = read_anchor(path)
        row = {"name": name, "steps": None}
        if result:
            row["tokens_per_s"] = float(result["tokens_per_s"])
            row["step_ms"] = float(result["median_step_ms"])
            row["alloc_peak_gb"] = float(result["peak_alloc_gb"])
            row["end_used_gb"] = float(result["device_used_gb"])
        sampled = peak_sample_mib(anchor_samples.get(name))
        row["driver_peak_gb"] = sampled * 1048576 / GB if sampled is not None else None
        row["busy_clocks"] = busy_clocks(anchor_samples.get(name))
        rows.append(row)

    print(f"fsdpd: steps {args.first}..{args.last} counted ({fsdpd['steps']} reported)"
          + (f", loss {fsdpd['first_loss']:.4f} -> {fsdpd['last_loss']:.4f}" if counted else ""))
    header = (f"{'run':<16}{'tokens/s':>12}{'step ms':>10}{'alloc peak GB':>15}"
              f"{'driver peak GB':>16}{'tok/s ratio':>13}{'alloc ratio':>13}{'driver ratio':>14}")
    print(header)
    print("-" * len(header))
    for row in rows:
        is_anchor = row is not fsdpd
        tokens_ratio = ratio(fsdpd.get("tokens_per_s"), row.get("tokens_per_s")) if is_anchor else None
        alloc_ratio = ratio(fsdpd.get("alloc_peak_gb"), row.get("alloc_peak_gb")) if is_anchor else None
        driver_ratio = (ratio(fsdpd.get("driver_peak_gb"), row.get("driver_peak_gb"))
                        if is_anchor else None)
        row.update(tokens_ratio=tokens_ratio, alloc_ratio=alloc_ratio, driver_ratio=driver_ratio)
        print(f"{row['name']:<16}{cell(row.get('tokens_per_s'), 0):>12}{cell(row.get('step_ms'), 1):>10}"
              f"{cell(row.get('alloc_peak_gb')):>15}{cell(row.get('driver_peak_gb')):>16}"
              f"{cell(tokens_ratio, 3):>13}{cell(alloc_ratio, 3):>13}{cell(driver_ratio, 3):>14}")
    print("ratios are fsdpd ÷ that run: tokens/s above 1 is faster, memory below 1 is leaner")
    for row in rows:
        if row.get("busy_clocks"):
            clock, watts, samples = row["busy_clocks"]
            print(f"{row['name']}: median SM clock {clock:.0f} MHz at {watts:.0f} W over {samples} "
                  "samples with the GPU >= 90% busy")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=2)
    return 0 if counted else 1


if __name__ == "__main__":
    sys.exit(main())
