"""Trains a job spec on a coordinator and exports its weights: README's Python tour as a program.

    python3 python/examples/train_and_export.py examples/demo.yaml --steps 50 --out demo.safetensors

Prints each event as one line while the job runs, then the tensors it exported. The coordinator
comes from --coordinator, else $FSDPD_COORDINATOR, else 127.0.0.1:7070; TLS and the token from
fsdpctl's environment (fsdpd.Client). The workers must be allowed to read the spec's data
(fsdpd-worker --allowed-root). The python_client test runs it; python_mypy checks it with
mypy --strict.
"""
from __future__ import annotations

import argparse
import sys

import fsdpd


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", help="the job spec, a YAML file")
    parser.add_argument("--steps", type=int, help="train.steps instead of the spec's")
    parser.add_argument("--out", help="write the weights here (safetensors)")
    parser.add_argument("--coordinator", help="host:port of fsdpd")
    args = parser.parse_args(argv)

    spec = fsdpd.load_spec(args.spec)  # a fsdpd.v1.JobSpec: relative paths resolved
    if args.steps is not None:
        spec.train.steps = args.steps
    with fsdpd.Client(args.coordinator) as client:
        dry = client.submit(spec, dry_run=True)
        if not dry.ok:
            for violation in dry.violations:
                print(f"{args.spec}: {violation}", file=sys.stderr)
            return 1
        job = client.submit(spec)
        print(f"submitted {job.id}")
        for event in client.watch(job.id):
            print(event)  # step 120/300 loss 2.413 tok/s 51,200 | state RUNNING: ...
        final = client.status(job.id)
        if final.state != fsdpd.JobState.SUCCEEDED:
            print(f"{final}", file=sys.stderr)
            for line in client.logs(job.id, tail=20):
                print(line, file=sys.stderr)
            return 1
        if args.out:
            client.export(job.id, args.out)
            print(f"weights in {args.out}")
        state_dict = client.export_state_dict(job.id)
        parameters = sum(tensor.numel() if hasattr(tensor, "numel") else tensor.size
                         for tensor in state_dict.values())
        print(f"{len(state_dict)} tensors, {parameters:,} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
