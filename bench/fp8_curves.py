#!/usr/bin/env python3
"""The FP8 loss curves of bench/gpu_fp8.sh: a table and a picture.

Reads fsdpd-train's JSON lines (one a step) for matmul_dtype bf16 and fp8 and prints, in
markdown: the loss of both at every 100th step with |loss_fp8 - loss_bf16| against the bound
max(1% of the bf16 loss, 0.02), then the median tokens/s, step time and peak memory over the
steps after the first ten, with the ratio fp8 / bf16 (and against the anchor's RESULT line when
given). With --svg PATH it also draws both curves, every step, as a plain SVG (no plotting
library needed; --y-max L clips it at loss L); with --csv PATH it writes step, loss_bf16,
loss_fp8 for every step. With --control FILE (a second bf16 run, bench/gpu_fp8.sh's
bf16-control) the table also gives that run's distance from bf16 against the same bound: how
far two bf16 runs part on the recipe, beside fp8's distance.

  bench/fp8_curves.py --bf16 out/bf16.jsonl --fp8 out/fp8.jsonl \
      [--anchor out/anchor_compiled.log] [--control out/bf16-control.jsonl]
      [--svg bench/fp8/loss_curves.svg] [--csv FILE] [--every 100]
"""
import argparse
import json
import re
import statistics
import sys


def read_steps(path):
    steps = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if "step" in record:
                steps[record["step"]] = record
    return steps


def median_after(steps, key, skip=10):
    values = [r[key] for s, r in sorted(steps.items()) if s > skip and key in r]
    return statistics.median(values) if values else float("nan")


def anchor_tokens_per_second(path):
    with open(path) as f:
        for line in f:
            if line.startswith("RESULT"):
                fields = dict(re.findall(r"(\w+)=([^\s]+)", line))
                batch, seq = (int(v) for v in fields["batch"].split("x"))
                return batch * seq * int(fields.get("world", 1)) / (
                    float(fields["median_step_ms"]) / 1e3)
    return None


def svg(bf16, fp8, path, y_top=None, control=None, width=760, height=420):
    left, right, top, bottom = 70, 20, 30, 50
    runs = (bf16, fp8) + ((control,) if control else ())
    steps = sorted(set().union(*runs))
    losses = [r["loss"] for d in runs for r in d.values()]
    x_max, y_min, y_max = max(steps), min(losses), max(losses)
    if y_top is not None:
        y_max = min(y_max, y_top)  # losses above it are drawn at the top edge
    y_min = max(0.0, y_min - 0.05 * (y_max - y_min))
    if y_max <= y_min:  # flat curves, or every loss above the clip: a unit range below the top
        y_min = y_max - 1.0

    def x(step):
        return left + (width - left - right) * step / x_max

    def y(loss):
        return top + (height - top - bottom) * (y_max - min(loss, y_max)) / (y_max - y_min)

    def polyline(data, colour):
        points = " ".join(f"{x(s):.1f},{y(r['loss']):.1f}" for s, r in sorted(data.items()))
        return (f'<polyline fill="none" stroke="{colour}" stroke-width="1" '
                f'points="{points}"/>')

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{width}" height="{height}" fill="white"/>']
    for i in range(6):
        loss = y_min + (y_max - y_min) * i / 5
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(loss):.1f}" '
                     f'y2="{y(loss):.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 6}" y="{y(loss) + 4:.1f}" text-anchor="end">'
                     f'{loss:.2f}</text>')
    for i in range(5):
        step = round(x_max * i / 4)
        parts.append(f'<text x="{x(step):.1f}" y="{height - bottom + 18}" '
                     f'text-anchor="middle">{step}</text>')
    parts.append(f'<text x="{(left + width - right) / 2}" y="{height - 10}" '
                 f'text-anchor="middle">step</text>')
    parts.append(f'<text x="14" y="{(top + height - bottom) / 2}" text-anchor="middle" '
                 f'transform="rotate(-90 14 {(top + height - bottom) / 2})">loss</text>')
    if control:  # drawn first, beneath the two it is measured against
        parts.append(polyline(control, "#2b8a3e"))
        parts.append(f'<text x="{width - right - 200}" y="{top + 32}" fill="#2b8a3e">'
                     f'bf16 control</text>')
    parts.append(polyline(bf16, "#1f5fbf"))
    parts.append(polyline(fp8, "#d9480f"))
    parts.append(f'<text x="{width - right - 200}" y="{top}" fill="#1f5fbf">'
                 f'matmul_dtype bf16</text>')
    parts.append(f'<text x="{width - right - 200}" y="{top + 16}" fill="#d9480f">'
                 f'matmul_dtype fp8</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bf16", required=True)
    parser.add_argument("--fp8", required=True)
    parser.add_argument("--anchor")
    parser.add_argument("--control", help="a second bf16 run (bench/gpu_fp8.sh's bf16-control): "
                        "its distance from bf16 at each checkpoint, beside fp8's")
    parser.add_argument("--svg")
    parser.add_argument("--csv")
    parser.add_argument("--y-max", type=float, help="the picture's top loss (higher ones clip)")
    parser.add_argument("--every", type=int, default=100)
    args = parser.parse_args()
    bf16, fp8 = read_steps(args.bf16), read_steps(args.fp8)
    if not bf16 or not fp8:
        sys.exit("fp8_curves: no steps in " + (args.bf16 if not bf16 else args.fp8))
    control = read_steps(args.control) if args.control else None
    if args.control and not control:
        sys.exit("fp8_curves: no steps in " + args.control)

    extra = " control | its diff | within |" if control else ""
    print("| step | loss bf16 | loss fp8 | abs diff | bound | within |" + extra)
    print("|---:|---:|---:|---:|---:|:---:|" + ("---:|---:|:---:|" if control else ""))
    # Every checkpoint both bf16 and fp8 reached; a control that stopped early (its time limit)
    # leaves its columns empty from there on.
    worst, failures, compared, control_failures, control_compared = 0.0, 0, 0, 0, 0
    last = min(max(bf16), max(fp8))
    for step in range(args.every, last + 1, args.every):
        if step not in bf16 or step not in fp8:
            continue
        a, b = bf16[step]["loss"], fp8[step]["loss"]
        bound = max(0.01 * a, 0.02)
        within = abs(b - a) <= bound
        compared += 1
        failures += not within
        worst = max(worst, abs(b - a) / bound)
        row = (f"| {step} | {a:.4f} | {b:.4f} | {abs(b - a):.4f} | {bound:.4f} | "
               f"{'yes' if within else '**no**'} |")
        if control and step in control:
            c = control[step]["loss"]
            control_within = abs(c - a) <= bound
            control_compared += 1
            control_failures += not control_within
            row += f" {c:.4f} | {abs(c - a):.4f} | {'yes' if control_within else '**no**'} |"
        elif control:
            row += " | | |"
        print(row)
    print(f"\n{compared} checkpoints compared, {failures} outside the bound; the largest "
          f"difference is {worst:.2f} of its bound.", end="")
    if control:
        print(f" The bf16 control (the same run, another attention kernel): {control_failures} "
              f"of its {control_compared} outside the same bound.", end="")
    print("\n")

    print("| run | tokens/s | step ms | peak memory MiB |")
    print("|---|---:|---:|---:|")
    rows = {}
    for name, data in (("bf16", bf16), ("fp8", fp8)):
        rows[name] = median_after(data, "tokens_per_second")
        print(f"| fsdpd-train, matmul_dtype {name} | {rows[name]:,.0f} | "
              f"{1e3 * median_after(data, 'step_seconds'):.1f} | "
              f"{max(r['memory_peak_bytes'] for r in data.values()) / 2**20:,.0f} |")
    anchor = anchor_tokens_per_second(args.anchor) if args.anchor else None
    if anchor:
        print(f"| FSDP2 + torch.compile | {anchor:,.0f} | | |")
    print(f"\nfp8 / bf16: {rows['fp8'] / rows['bf16']:.3f}×", end="")
    if anchor:
        print(f"; bf16 / compiled anchor: {rows['bf16'] / anchor:.3f}×; "
              f"fp8 / compiled anchor: {rows['fp8'] / anchor:.3f}×", end="")
    print()
    if args.svg:
        svg(bf16, fp8, args.svg, args.y_max, control)
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("step,loss_bf16,loss_fp8" + (",loss_bf16_control" if control else "") + "\n")
            for step in sorted(set(bf16) & set(fp8)):
                row = f"{step},{bf16[step]['loss']:.5f},{fp8[step]['loss']:.5f}"
                if control:
                    row += f",{control[step]['loss']:.5f}" if step in control else ","
                f.write(row + "\n")


if __name__ == "__main__":
    main()
