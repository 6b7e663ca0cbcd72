"""`fsdpctl profile --roofline`, looked at as a person would, through the real programs on
loopback, for a two-rank CPU job with a profiling window:

- fsdpctl says where it wrote the chart (with --json, the path and size);
- the SVG renders to PNG with a real renderer, every text lies inside the canvas and no two
  texts overlap (svg_picture.py renders each text alone and compares the pixels);
- no kernel sits above the memory roof: each kernel's bytes ÷ time is at most the window's
  peak bandwidth, and its FLOPs ÷ time at most the peak FLOP rate times 1.5 (the GEMM peak is
  measured once, at the worker's start, on a machine that may be busier then).

usage: roofline_picture_test.py SOURCE_DIR BUILD_DIR
With FSDPD_TEST_PICTURES=DIR the SVG and its PNG are copied there, to look at.
"""
import json
import os
import re
import shutil
import sys

from local_cluster import Sandbox, check, wait_until
from svg_picture import layout_faults, render_png


def write_spec(sandbox):
    path = os.path.join(sandbox.dir, "profiled.yaml")
    with open(path, "w") as file:
        file.write("""name: profiled
model: {vocab: 256, dim: 128, layers: 2, heads: 4, ffn_mult: 4}
data: {source: synthetic, seq_len: 64}
train: {batch_size: 8, steps: 10, lr: 1.0e-3, seed: 1}
parallel: {world_size: 2, device: cpu, param_dtype: fp32, reduce_dtype: fp32}
checkpoint: {every_steps: 0}
profile: {start_step: 4, steps: 3}
max_restarts: 0
""")
    return path


def main(source_dir, build_dir):
    sandbox = Sandbox(build_dir, "fsdpd-roofline-")
    sandbox.use_ports()
    ok = False
    try:
        sandbox.start([sandbox.binary("fsdpd"), "--state-dir", os.path.join(sandbox.dir, "state")],
                      "fsdpd.log")
        wait_until(sandbox.serving, 30, "the coordinator")
        for rank in range(2):
            sandbox.start([sandbox.binary("fsdpd-worker"), "--device", "cpu", "--hostname",
                           f"roofline-{rank}"], f"worker{rank}.log")
        wait_until(lambda: sandbox.idle_workers() >= 2, 60, "two idle workers")
        result = sandbox.ctl("submit", write_spec(sandbox), "--watch", timeout=600)
        check(result.returncode == 0, f"submit --watch: {result.stdout[-2000:]}{result.stderr}")
        job = re.search(r"\bjob-\d+\b", result.stdout).group(0)

        svg = os.path.join(sandbox.dir, "roofline.svg")
        result = sandbox.ctl("profile", job, "--roofline", svg)
        check(result.returncode == 0, f"profile --roofline: {result.stderr}")
        said = result.stdout.splitlines()[-1]
        check(re.fullmatch(r"wrote the roofline chart \(\d+(\.\d+)? (B|KiB)\) to " +
                           re.escape(svg), said), f"the last line says {said!r}")
        report = sandbox.ctl_json("profile", job, "--roofline", svg)
        check(report["roofline"]["path"] == svg and
              report["roofline"]["bytes"] == os.path.getsize(svg),
              f"--json roofline: {report.get('roofline')}")
        print(said)

        png = svg[:-4] + ".png"
        render_png(svg, png)
        if os.environ.get("FSDPD_TEST_PICTURES"):
            os.makedirs(os.environ["FSDPD_TEST_PICTURES"], exist_ok=True)
            for path in (svg, png):
                shutil.copy(path, os.environ["FSDPD_TEST_PICTURES"])
        faults, boxes = layout_faults(svg, os.path.join(sandbox.dir, "texts"))
        print(f"{len(boxes)} texts rendered one by one")
        check(len(boxes) >= 20 and all(box is not None for _, box in boxes),
              f"texts that draw nothing: {[text for text, box in boxes if box is None]}")
        check(not faults, "the chart is not readable:\n  " + "\n  ".join(faults))

        peak_bytes = report["peak_bytes_per_second"]
        peak_flops = report["peak_flops_per_second"]
        placed = [k for k in report["kernels"]
                  if k["flops"] > 0 and k["bytes"] > 0 and k["total_seconds"] > 0]
        check(len(placed) >= 10, f"only {len(placed)} kernels can be placed")
        above = [f"{k['name']} ({k['unit']}): {k['bytes'] / k['total_seconds'] / 1e9:.1f} GB/s"
                 for k in placed if k["bytes"] / k["total_seconds"] > peak_bytes]
        check(not above, f"above the {peak_bytes / 1e9:.1f} GB/s memory roof: {above}")
        above = [f"{k['name']} ({k['unit']}): {k['flops'] / k['total_seconds'] / 1e9:.1f} GFLOP/s"
                 for k in placed if k["flops"] / k["total_seconds"] > 1.5 * peak_flops]
        check(not above, f"far above the {peak_flops / 1e9:.1f} GFLOP/s compute roof: {above}")
        fastest = max(k["bytes"] / k["total_seconds"] for k in placed)
        print(f"roofs {peak_flops / 1e9:.1f} GFLOP/s and {peak_bytes / 1e9:.1f} GB/s; the fastest "
              f"kernel moves {fastest / 1e9:.1f} GB/s")
        print("roofline: says where it went, readable, every kernel under its roofs")
        ok = True
    finally:
        sandbox.finish(ok)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
