"""Checkpoints you can list, exports of any checkpoint, and a job started from another job's
checkpoint, through the real fsdpd, fsdpd-worker and fsdpctl on loopback.

- A CPU job that checkpoints every few steps (keep 2) and is CANCELLED mid-run: `fsdpctl
  checkpoints` lists its newest two (step, size > 0, the host), newest first, in 80 columns; the
  pruned ones are gone.
- `fsdpctl export JOB --step N` writes a safetensors file whose tensors equal, bit for bit, the
  final model of the same job trained for N steps (training is deterministic, so that is step
  N's weights); without --step it exports the newest checkpoint; a step it has no checkpoint of
  is an error naming the steps there are, with a non-zero exit.
- `fsdpctl resubmit JOB --from CANCELLED@STEP` at world size 1 instead of 2: the stored spec
  names the origin's uid and step, and the first step's loss is the loss of a job started from
  the exported file of that step (checkpoint.init_from), to the last digit, and not a fresh
  job's.
- A checkpoint with a corrupt rank file does not export: the error names the file. While an
  export is prepared, fsdpctl redraws one progress line on a terminal, and prints a line per
  change elsewhere.
- After a coordinator restart the checkpoints are still listed (SQLite).

usage: checkpoint_export_test.py SOURCE_DIR BUILD_DIR
"""
import json
import os
import re
import signal
import struct
import sys

from local_cluster import Sandbox, check, generate_stubs, wait_until

EVERY = 4
SPEC = """name: {name}
model: {{vocab: 64, dim: 32, layers: 1, heads: 2, ffn_mult: 2}}
data: {{source: synthetic, seq_len: 16}}
train: {{batch_size: 2, steps: {steps}, lr: 1.0e-2, seed: 3}}
parallel: {{world_size: {world}, device: cpu, param_dtype: fp32, reduce_dtype: fp32}}
checkpoint: {{every_steps: {every}, keep: 2{init}}}
max_restarts: 0
"""


def write_spec(sandbox, name, steps, world=2, every=EVERY, init=""):
    path = os.path.join(sandbox.dir, f"{name}.yaml")
    with open(path, "w") as file:
        file.write(SPEC.format(name=name, steps=steps, world=world, every=every, init=init))
    return path


def submit(sandbox, spec):
    result = sandbox.ctl("submit", spec)
    check(result.returncode == 0, f"submit {spec}: {result.stderr}")
    return re.search(r"\bjob-\d+\b", result.stdout).group(0)


def state(sandbox, job):
    return sandbox.ctl_json("status", job)["state"]


def finish(sandbox, job, timeout=300):
    wait_until(lambda: state(sandbox, job) in ("SUCCEEDED", "FAILED", "CANCELLED"), timeout,
               f"{job} to end")
    check(state(sandbox, job) == "SUCCEEDED", f"{job} is {state(sandbox, job)}")


def safetensors(path):
    """{name: (dtype, shape, raw bytes)} and the metadata of a safetensors file."""
    with open(path, "rb") as file:
        data = file.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    metadata = header.pop("__metadata__", {})
    body = data[8 + length:]
    tensors = {name: (entry["dtype"], entry["shape"],
                      body[entry["data_offsets"][0]:entry["data_offsets"][1]])
               for name, entry in header.items()}
    return tensors, metadata


def checkpoints(sandbox, job):
    return sandbox.ctl_json("checkpoints", job)["checkpoints"]


def first_loss(stubs, channel, job):
    jobs_pb2, jobs_pb2_grpc = stubs
    stub = jobs_pb2_grpc.JobServiceStub(channel)
    for event in stub.WatchJob(jobs_pb2.WatchJobRequest(id=job), timeout=60):
        if event.HasField("step") and event.step.step == 1:
            return event.step.loss
    raise AssertionError(f"{job} reported no step 1")


def main(source_dir, build_dir):
    sandbox = Sandbox(build_dir, "fsdpd-checkpoints-")
    sandbox.use_ports()
    ok = False
    try:
        generate_stubs(source_dir, os.path.join(sandbox.dir, "stubs"))
        import grpc
        from fsdpd.v1 import jobs_pb2, jobs_pb2_grpc
        state_dir = os.path.join(sandbox.dir, "state")
        root = os.path.join(sandbox.dir, "checkpoints")
        coordinator = sandbox.start([sandbox.binary("fsdpd"), "--state-dir", state_dir],
                                    "fsdpd.log")
        wait_until(sandbox.serving, 30, "the coordinator")
        for rank in range(2):
            sandbox.start([sandbox.binary("fsdpd-worker"), "--device", "cpu", "--hostname",
                           f"ckpt-host-{rank}", "--checkpoint-root", root, "--allowed-root",
                           sandbox.dir], f"worker{rank}.log")
        wait_until(lambda: sandbox.idle_workers() >= 2, 60, "two idle workers")

        # A long job, cancelled once it has pruned its first checkpoints.
        job = submit(sandbox, write_spec(sandbox, "long", 1000000))
        wait_until(lambda: any(c["step"] >= 4 * EVERY for c in checkpoints(sandbox, job)), 120,
                   f"{job} to commit its fourth checkpoint")
        check(sandbox.ctl("cancel", job).returncode == 0, "cancel")
        wait_until(lambda: state(sandbox, job) == "CANCELLED", 60, f"{job} to be cancelled")
        # The ranks' results come after whatever rank 0 reported before them (a commit that
        # was under way when the cancellation came): once the workers are idle, all of it is in.
        wait_until(lambda: sandbox.idle_workers() >= 2, 60, "the workers to report back")
        listed = checkpoints(sandbox, job)
        steps = [c["step"] for c in listed]
        check(len(listed) == 2 and steps[0] - steps[1] == EVERY and steps[0] % EVERY == 0,
              f"keep 2: the newest two checkpoints, newest first, got {steps}")
        for entry in listed:
            check(entry["size_bytes"] > 0, f"size of {entry}")
            check(entry["hosts"] and set(entry["hosts"]) <= {"ckpt-host-0", "ckpt-host-1"},
                  f"hosts of {entry}")
            check(entry["world_size"] == 2 and entry["attempt"] == 1, f"{entry}")
        on_disk = sorted(int(name[5:]) for name in os.listdir(os.path.join(
            root, sandbox.ctl_json("status", job)["uid"])) if name.startswith("step-"))
        check(on_disk == sorted(steps), f"listed {steps}, on disk {on_disk}")
        table = sandbox.ctl("checkpoints", job)
        check(table.returncode == 0, f"checkpoints: {table.stderr}")
        lines = table.stdout.splitlines()
        print(table.stdout)
        check(lines[0].split() == ["STEP", "COMMITTED", "SIZE", "ATTEMPT", "WORLD", "HOSTS"],
              f"header {lines[0]!r}")
        check([line.split()[0] for line in lines[1:]] == [str(s) for s in steps],
              f"rows {lines[1:]}")
        check(all(len(line) <= 80 for line in lines), "a line is wider than 80 columns")
        check("ckpt-host-" in lines[1], f"no host in {lines[1]!r}")
        print(f"checkpoints: {job} lists {steps} (pruned ones gone), with size and hosts")

        # Export of an older checkpoint, of the newest, and of one that does not exist.
        older, newest = steps[1], steps[0]
        older_path = os.path.join(sandbox.dir, "older.safetensors")
        result = sandbox.ctl("export", job, "--step", str(older), "-o", older_path, timeout=120)
        check(result.returncode == 0, f"export --step {older}: {result.stderr}")
        newest_path = os.path.join(sandbox.dir, "newest.safetensors")
        result = sandbox.ctl("export", job, "-o", newest_path, timeout=120)
        check(result.returncode == 0, f"export: {result.stderr}")
        _, metadata = safetensors(newest_path)
        check(metadata.get("step") == str(newest), f"newest export's metadata {metadata}")
        result = sandbox.ctl("export", job, "--step", str(newest + 1), "-o",
                             os.path.join(sandbox.dir, "none.safetensors"))
        check(result.returncode != 0, "export of a step without a checkpoint succeeded")
        check(f"no complete checkpoint of step {newest + 1}" in result.stderr and
              f"{newest}, {older}" in result.stderr, f"the error: {result.stderr!r}")
        check(not os.path.exists(os.path.join(sandbox.dir, "none.safetensors")), "a file written")

        # The same job trained for `older` steps ends with step `older`'s weights.
        reference_job = submit(sandbox, write_spec(sandbox, "reference", older, every=0))
        finish(sandbox, reference_job)
        reference_path = os.path.join(sandbox.dir, "reference.safetensors")
        result = sandbox.ctl("export", reference_job, "-o", reference_path, timeout=120)
        check(result.returncode == 0, f"export {reference_job}: {result.stderr}")
        exported, exported_metadata = safetensors(older_path)
        reference, reference_metadata = safetensors(reference_path)
        check(sorted(exported) == sorted(reference) and len(exported) > 3,
              f"tensors {sorted(exported)} vs {sorted(reference)}")
        for name in reference:
            check(exported[name] == reference[name], f"{name} differs from step {older}'s")
        check(exported_metadata == reference_metadata,
              f"metadata {exported_metadata} vs {reference_metadata}")
        print(f"export: step {older} of the cancelled job equals its weights bit for bit; "
              f"the default is step {newest}; step {newest + 1} is refused")

        # Started from the cancelled job's checkpoint at world size 1 (fsdpctl resubmit --from),
        # against a job started from the export of that step and a fresh one.
        fresh = submit(sandbox, write_spec(sandbox, "fresh", 3, world=1, every=0))
        from_file = submit(sandbox, write_spec(sandbox, "from-file", 3, world=1, every=0,
                                               init=f", init_from: {older_path}"))
        result = sandbox.ctl("resubmit", fresh, "--from", f"{job}@{older}")
        check(result.returncode == 0, f"resubmit --from: {result.stderr}")
        from_job = re.search(r"\bjob-\d+\b", result.stdout).group(0)
        stored = sandbox.ctl_json("status", from_job)
        check(stored["spec"]["checkpoint"].get("init_from_job_uid") ==
              sandbox.ctl_json("status", job)["uid"] and
              int(stored["spec"]["checkpoint"].get("init_from_step", 0)) == older,
              f"the stored spec does not name the origin: {stored['spec']['checkpoint']}")
        for started in (from_job, from_file, fresh):
            finish(sandbox, started)
        with grpc.insecure_channel(sandbox.address) as channel:
            losses = {name: first_loss((jobs_pb2, jobs_pb2_grpc), channel, started)
                      for name, started in (("job", from_job), ("file", from_file),
                                            ("fresh", fresh))}
        check(losses["job"] == losses["file"],
              f"first loss from the checkpoint {losses['job']!r} vs from its export "
              f"{losses['file']!r}")
        check(losses["job"] != losses["fresh"], f"the same first loss as a fresh job: {losses}")
        print(f"resubmit --from: first loss {losses['job']:.6f} at world 1 equals the export's")

        # A corrupt rank file: the export fails, naming it, and exits non-zero.
        short = submit(sandbox, write_spec(sandbox, "short", 4, every=2))
        finish(sandbox, short)
        rank_file = os.path.join(root, sandbox.ctl_json("status", short)["uid"], "step-00000002",
                                 "rank-00001.bin")
        with open(rank_file, "r+b") as file:
            file.seek(os.path.getsize(rank_file) // 2)
            byte = file.read(1)
            file.seek(-1, os.SEEK_CUR)
            file.write(bytes([byte[0] ^ 0x40]))
        result = sandbox.ctl("export", short, "--step", "2", "-o",
                             os.path.join(sandbox.dir, "corrupt.safetensors"), timeout=120)
        check(result.returncode != 0, "the export of a corrupt checkpoint succeeded")
        check("checksum mismatch (CRC32C of rank-00001.bin" in result.stderr,
              f"the error does not name the file: {result.stderr!r}")
        print(f"export: a corrupt rank file: {result.stderr.strip().splitlines()[-1]}")
        # Not on a terminal, each change of the progress is one plain line, never redrawn.
        progress = [line for line in result.stderr.splitlines() if line.startswith("preparing")]
        check(progress and len(set(progress)) == len(progress) and "\x1b[" not in result.stderr,
              f"progress off a terminal: {result.stderr!r}")
        # On one (script's pty), one line redrawn in place and cleared at the end.
        line = f"fsdpctl export {short} --step 4 -o {os.path.join(sandbox.dir, 's4.safetensors')}"
        result = sandbox.run(["script", "-qec", line, "/dev/null"], timeout=120)
        check(result.returncode == 0, f"export on a terminal: {result.stdout!r}")
        # (text mode reads each "\r" as a line end)
        check(f"\n\x1b[Kpreparing step 4 of {short}: " in result.stdout and
              "\npreparing" not in result.stdout and "\x1b[Kwrote the model" in result.stdout,
              f"progress on a terminal: {result.stdout!r}")
        print("export: progress redrawn in place on a terminal, a line per change elsewhere")

        # A restarted coordinator still lists them.
        coordinator.send_signal(signal.SIGTERM)
        coordinator.wait(timeout=30)
        sandbox.start([sandbox.binary("fsdpd"), "--state-dir", state_dir], "fsdpd-2.log")
        wait_until(sandbox.serving, 30, "the restarted coordinator")
        again = [c["step"] for c in checkpoints(sandbox, job)]
        check(again == steps, f"after a restart: {again}, before: {steps}")
        print("coordinator restart: still listed")
        ok = True
    finally:
        sandbox.finish(ok)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
