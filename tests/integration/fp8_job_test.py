"""A job with parallel.matmul_dtype fp8 through the real fsdpd, fsdpd-worker and fsdpctl on
loopback, on CPU workers (whose FP8 products are the CUDA ones emulated in fp32,
kernels/cpu/fp8.h).

- A tiny MiniLLM at world 2 over a learnable token file SUCCEEDS with matmul_dtype fp8, its
  losses fall, `fsdpctl status` says "fp8 matmuls", and its losses are near, but not equal to,
  those of the same job with matmul_dtype bf16 (the products did quantize).
- A spec whose FFN width is not a multiple of 16 is refused at submission, naming
  parallel.matmul_dtype and the dimension.

usage: fp8_job_test.py SOURCE_DIR BUILD_DIR   (the fsdpd package on PYTHONPATH)
"""
import json
import os
import re
import shutil
import sys

from local_cluster import Sandbox, check

import fsdpd

STEPS = 30


def spec_dict(name, tokens, matmul_dtype, ffn_mult=4):
    return {"name": name,
            "model": {"vocab": 64, "dim": 32, "layers": 2, "heads": 2, "ffn_mult": ffn_mult},
            "data": {"source": "tokens", "path": tokens, "token_bytes": 2, "seq_len": 16},
            "train": {"batch_size": 2, "steps": STEPS, "lr": 1.0e-2, "seed": 5},
            "parallel": {"world_size": 2, "device": "cpu", "param_dtype": "fp32",
                         "matmul_dtype": matmul_dtype},
            "checkpoint": {"every_steps": 0, "keep": 1}, "profile": {"steps": 0},
            "max_restarts": 0}


def main(source_dir, build_dir):
    sandbox = Sandbox(build_dir, "fsdpd-fp8-")
    sandbox.use_ports()
    ok = False
    try:
        tokens = os.path.join(sandbox.dir, "tokens.bin")
        shutil.copy(os.path.join(source_dir, "tests", "golden", "llama_tiny", "tokens.bin"),
                    tokens)
        sandbox.start_cpu_cluster(2)
        client = fsdpd.Client(sandbox.address)

        # dim 40 (heads 2 of 20): dim, the qkv width and the FFN's all off 16.
        bad = os.path.join(sandbox.dir, "bad.yaml")
        spec = spec_dict("bad", tokens, "fp8")
        spec["model"]["dim"] = 40
        with open(bad, "w") as file:
            json.dump(spec, file)  # JSON is YAML
        result = sandbox.ctl("submit", bad)
        check(result.returncode != 0 and "parallel.matmul_dtype: fp8 needs every dimension of the "
              "linear layers a multiple of 16: model.dim is 40" in result.stderr,
              f"bad spec: {result.returncode} {result.stderr!r}")

        losses = {}
        for dtype in ("fp8", "bf16"):
            path = os.path.join(sandbox.dir, f"{dtype}.yaml")
            with open(path, "w") as file:
                json.dump(spec_dict(f"tiny-{dtype}", tokens, dtype), file)
            result = sandbox.ctl("submit", path)
            check(result.returncode == 0, f"submit {dtype}: {result.stderr}")
            job = re.search(r"\bjob-\d+\b", result.stdout).group(0)
            final = client.wait(job)
            check(final.state == fsdpd.JobState.SUCCEEDED, f"{job}: {final}")
            losses[dtype] = [event.loss for event in client.watch(job)
                             if isinstance(event, fsdpd.StepEvent)]
            status = sandbox.ctl("status", job)
            check(status.returncode == 0, f"status {job}: {status.stderr}")
            said = "fp8 matmuls" in status.stdout
            check(said == (dtype == "fp8"), f"status of the {dtype} job: {status.stdout!r}")
            print(f"{job} (matmul_dtype {dtype}): loss {losses[dtype][0]:.4f} -> "
                  f"{losses[dtype][-1]:.4f}")
        fp8, bf16 = losses["fp8"], losses["bf16"]
        check(len(fp8) == STEPS and fp8[-1] < fp8[0] - 0.5, f"the fp8 losses must fall: {fp8}")
        check(fp8 != bf16, "fp8 and bf16 losses are identical: the products did not quantize")
        # Operands off by at most 2^-4 (e4m3) or 2^-3 (e5m2) relative: the curves stay within a
        # few percent of each other over 30 steps; a broken product would not learn at all.
        worst = max(abs(a - b) / b for a, b in zip(fp8, bf16))
        check(worst < 0.1, f"fp8 strays {worst:.3f} from bf16: {fp8} vs {bf16}")
        print(f"largest relative difference of the fp8 losses from bf16's: {worst:.4f}")
        ok = True
    finally:
        sandbox.finish(ok)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
