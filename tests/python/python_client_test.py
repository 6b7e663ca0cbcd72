"""The Python client against a real coordinator with two CPU workers on loopback.

A program that uses only the fsdpd package submits the demo spec's fields (examples/demo.yaml,
fewer steps) as a dict, watches the job to SUCCEEDED and exports its weights into numpy arrays
(no torch here). On the way it checks the objects the calls return (states as fsdpd.JobState,
events that print as one line each, submit and its dry run alike), the server-side defaults,
the BadRequest field violations (printed once), the codes of issue-prone calls, per-service
health and server reflection; then it runs python/examples/train_and_export.py. The checks
that need no coordinator (package_checks.py) run first.

usage: python_client_test.py BUILD_DIR SOURCE_DIR   (the package on PYTHONPATH)
"""
import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile
import time

import grpc
import yaml

import fsdpd
import package_checks
from fsdpd.v1 import common_pb2

STEPS = 30
check = package_checks.check


def expect_error(code, call, *args, **kwargs):
    try:
        result = call(*args, **kwargs)
        if hasattr(result, "__next__"):
            list(result)
    except fsdpd.FsdpdError as error:
        check(error.code == code, f"{call.__name__}: expected {code.name}, got {error}")
        return error
    raise AssertionError(f"{call.__name__}: expected {code.name}, got success")


def health(channel, service):
    # grpc.health.v1.HealthCheckRequest{service} by hand: field 1, length-delimited.
    name = service.encode()
    call = channel.unary_unary("/grpc.health.v1.Health/Check")
    return call(b"\x0a" + bytes([len(name)]) + name, timeout=10)  # SERVING: b"\x08\x01"


def wait_for_address(process, log_path, prefix, deadline):
    """The address after `prefix` in the log (fsdpd prints "fsdpd listening on HOST:PORT" once
    bound, the port of the system's choice for :0); raises if the process exits first."""
    while time.time() < deadline:
        with open(log_path) as f:
            found = re.search(re.escape(prefix) + r"(\S+)\s", f.read())
        if found:
            return found.group(1)
        if process.poll() is not None:
            raise AssertionError(f"fsdpd exited ({process.returncode}) before listening")
        time.sleep(0.02)
    raise AssertionError(f"fsdpd did not log '{prefix}'")


def wait_for_reason(client, job_id, word, deadline):
    """The job once its reason names `word`; fails at the deadline with the last one seen."""
    job = client.status(job_id)
    while word not in job.reason and time.time() < deadline:
        time.sleep(0.05)
        job = client.status(job_id)
    check(word in job.reason, f"{job_id}'s reason never named {word}: {job.reason!r}")
    return job


def wait_for_workers(client, count, deadline):
    while time.time() < deadline:
        try:
            workers = client.workers()
            if sum(1 for w in workers if w.state == fsdpd.WorkerState.IDLE) >= count:
                return workers
        except fsdpd.FsdpdError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{count} workers did not register")


def check_relative_paths(folder):
    """load_spec resolves every path field (the file_path option of proto/fsdpd/v1/spec.proto,
    which fsdpctl, the validator and the workers read too) against the YAML file's folder."""
    from fsdpd import spec as spec_module
    fields = spec_module.path_fields()
    # The same list as spec_path_fields_test's, read from the same option.
    check(fields == [("data", "path"), ("data", "eval_path"), ("checkpoint", "init_from")],
          f"path fields {fields}")
    specs = os.path.join(folder, "specs")
    os.makedirs(specs)
    spec_path = os.path.join(specs, "relative.yaml")
    with open(spec_path, "w") as f:
        f.write("name: relative\ndata: {source: tokens, path: ../data/tokens.bin}\n"
                "checkpoint: {init_from: init.safetensors}\n")
    spec = fsdpd.load_spec(spec_path)
    real = os.path.realpath(folder)
    check(spec.data.path == os.path.join(real, "data", "tokens.bin"), f"data.path {spec.data.path}")
    check(spec.checkpoint.init_from == os.path.join(real, "specs", "init.safetensors"),
          f"checkpoint.init_from {spec.checkpoint.init_from}")
    with open(spec_path, "w") as f:
        f.write("name: relative\ncheckpoint: {init_from: /srv/init.safetensors}\n")
    spec = fsdpd.load_spec(spec_path)
    check(not spec.HasField("data") and spec.checkpoint.init_from == "/srv/init.safetensors",
          f"an unset section must stay unset and an absolute path as it is: {spec}")


def main(build_dir, source_dir):
    package_checks.run_all()
    folder = tempfile.mkdtemp(prefix="fsdpd-python-")
    check_relative_paths(folder)
    coordinator_log = os.path.join(folder, "fsdpd.log")
    with open(coordinator_log, "w") as log:
        coordinator = subprocess.Popen(
            [os.path.join(build_dir, "server", "fsdpd"), "--listen", "127.0.0.1:0",
             "--metrics-listen", "127.0.0.1:0", "--state-dir", os.path.join(folder, "state")],
            stdout=log, stderr=subprocess.STDOUT)
    processes = [coordinator]
    logs = open(os.path.join(folder, "workers.log"), "w")
    try:
        address = wait_for_address(coordinator, coordinator_log, "fsdpd listening on ",
                                   time.time() + 30)
        for rank in range(2):
            processes.append(subprocess.Popen(
                [os.path.join(build_dir, "worker", "fsdpd-worker"), "--coordinator", address,
                 "--device", "cpu", "--checkpoint-root", os.path.join(folder, "checkpoints"),
                 "--hostname", f"py-worker-{rank}", "--heartbeat-interval", "500ms",
                 "--allowed-root", source_dir, "--allowed-root", folder],
                stdout=logs, stderr=subprocess.STDOUT))
        run(address, source_dir)
        check_sharded_job(fsdpd.Client(address), source_dir, folder)
    except BaseException:
        logs.flush()
        for name in ("fsdpd.log", "workers.log"):
            with open(os.path.join(folder, name)) as f:
                sys.stderr.write(f"--- {name}\n{f.read()[-6000:]}")
        raise
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(timeout=30)


def check_service(address):
    """Health by service name, and reflection lists the services without .proto files."""
    channel = grpc.insecure_channel(address)
    for service in ("", "fsdpd.v1.JobService", "fsdpd.v1.WorkerService",
                    "fsdpd.v1.RendezvousService"):
        check(health(channel, service) == b"\x08\x01", f"health of '{service}' is not SERVING")
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    answers = stub.ServerReflectionInfo(iter([request]))
    services = {s.name for a in answers for s in a.list_services_response.service}
    check("fsdpd.v1.JobService" in services, f"reflection lists {services}")


def check_bad_specs(client, spec):
    """A misspelled key fails in the client, naming it; a bad value comes back as
    INVALID_ARGUMENT with one violation per field, each printed once; a dry run lists them."""
    try:
        client.submit(dict(spec, modle=spec["model"]))
        raise AssertionError("a spec with 'modle' was submitted")
    except fsdpd.FsdpdError as error:
        check([v.field for v in error.violations] == ["modle"], f"modle: {error}")
    bad = dict(spec, model=dict(spec["model"], dim=30), train=dict(spec["train"], lr=-1))
    error = expect_error(grpc.StatusCode.INVALID_ARGUMENT, client.submit, bad)
    fields = {field for field, _ in error.violations}
    check({"model.dim", "train.lr"} <= fields, f"violations name {fields}")
    text = str(error)
    for violation in error.violations:
        check(text.count(violation.description) == 1,
              f"{violation.field} printed {text.count(violation.description)} times:\n{text}")
    dry = client.submit(bad, dry_run=True)
    check({"model.dim", "train.lr"} <= {v.field for v in dry.violations} and not dry.ok,
          f"the dry run of a bad spec lists {dry.violations}")
    expect_error(grpc.StatusCode.INVALID_ARGUMENT, client.status, "")


def check_submit(client, spec):
    """submit and its dry run answer the same kind of object; the real one has an id, the
    stored job its defaults (an explicit 0 kept) and a JobState."""
    dry = client.submit(spec, dry_run=True)
    job = client.submit(spec)
    check(type(dry) is type(job) is fsdpd.SubmitResult,
          f"submit answered {type(job).__name__}, its dry run {type(dry).__name__}")
    check(dry.dry_run and dry.id == "" and dry.violations == [] and dry.ok,
          f"dry run of a good spec: {dry}")
    check(dry.job.spec.train.eps == 1e-8, f"the dry run's spec lacks the defaults: {dry.job.spec}")
    check(not job.dry_run and job.id and job.job.id == job.id, f"submit answered {job}")
    check(isinstance(job.job.state, fsdpd.JobState) and job.state in (
        fsdpd.JobState.PENDING, fsdpd.JobState.SCHEDULED), f"submitted job's state {job.state!r}")
    stored = job.job
    check(stored.spec.train.eps == 1e-8 and stored.spec.train.lr_schedule == "constant",
          f"defaults not applied: {stored.spec.train}")
    check(stored.spec.parallel.reshard_after_forward, "reshard_after_forward default is true")
    check(stored.spec.profile.HasField("steps") and stored.spec.profile.steps == 0,
          "profile.steps: 0 must stay 0")
    check(stored.create_time is not None and stored.create_time.tzinfo is not None,
          f"create_time {stored.create_time!r}")
    check(client.status(job.id).spec == stored.spec, "GetJob's spec differs from SubmitJob's")
    check(stored.total_steps == STEPS and stored.name == spec["name"], f"job {stored}")
    return job.id


def watch_printed(client, job_id):
    """Watches the job, printing each event as README does; returns (events, printed lines)."""
    printed = io.StringIO()
    events = []
    with contextlib.redirect_stdout(printed):
        for event in client.watch(job_id):
            events.append(event)
            print(event)
    return events, printed.getvalue().splitlines()


def check_events(client, job_id):
    """Each event prints as one line (step N/TOTAL loss L tok/s T, or state NAME: reason) and
    keeps its message in .proto; states are JobStates."""
    events, lines = watch_printed(client, job_id)
    check(len(lines) == len(events), f"{len(events)} events printed {len(lines)} lines: "
          f"{lines[:12]}")
    steps = [e for e in events if isinstance(e, fsdpd.StepEvent)]
    states = [e for e in events if isinstance(e, fsdpd.StateEvent)]
    check(len(steps) + len(states) == len(events), f"unexpected events {events[:3]}")
    check(steps and steps[-1].step == STEPS, f"watched steps end at {steps[-1:]}")
    check(all(e.proto.step == e.step and e.total_steps == STEPS for e in steps),
          "a step event's .proto is its StepReport")
    check(all(isinstance(e.state, fsdpd.JobState) for e in states) and
          states[-1].state == fsdpd.JobState.SUCCEEDED, f"states {[str(e) for e in states]}")
    step_line = re.compile(rf"^step \d+/{STEPS} loss [-+.\deE]+ tok/s [\d,]+$")
    state_line = re.compile(r"^state [A-Z_]+(: .+)?$")
    for event, line in zip(events, lines):
        pattern = step_line if isinstance(event, fsdpd.StepEvent) else state_line
        check(pattern.match(line), f"event printed as {line!r}")
    check(any(line.startswith(f"step {STEPS}/{STEPS} ") for line in lines),
          f"no line for the last step: {lines[-3:]}")


def check_logs(client, job_id):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        lines = list(client.logs(job_id))
        for line in lines:
            print(line)
    check(any(line.text for line in lines), "the job has no log lines")
    out = printed.getvalue().splitlines()
    check(len(out) == len(lines) and all(re.match(r"^log rank\d+( \w+)?: ", o) for o in out),
          f"{len(lines)} log lines printed as {len(out)}: {out[:5]}")
    check(all(line.proto.text == line.text for line in lines), "LogLine.proto")


def check_checkpoints(client, job_id):
    """list_checkpoints and export(step=): the newest two of every STEPS // 3 steps, and the
    earlier one's weights, which differ from the final model's."""
    every = STEPS // 3
    listed = client.list_checkpoints(job_id)
    check([c.step for c in listed] == [STEPS, STEPS - every],
          f"checkpoints {[c.step for c in listed]}")
    check(all(c.size_bytes > 0 and c.hosts and c.world_size == 2 for c in listed),
          f"checkpoints {listed}")
    earlier = fsdpd.read_safetensors(client.export(job_id, step=STEPS - every))
    final = fsdpd.read_safetensors(client.export(job_id))
    check(sorted(earlier) == sorted(final), f"tensors {sorted(earlier)} vs {sorted(final)}")
    check(any((earlier[name] != final[name]).any() for name in final),
          "the checkpoint of an earlier step holds the final weights")
    expect_error(grpc.StatusCode.NOT_FOUND, client.list_checkpoints, "job-999999")
    print(f"python client: {len(listed)} checkpoints listed; step {STEPS - every} exported")


def run(address, source_dir):
    client = fsdpd.Client(address)
    workers = wait_for_workers(client, 2, time.time() + 60)
    check(all(isinstance(w.state, fsdpd.WorkerState) for w in workers),
          f"worker states {[type(w.state) for w in workers]}")
    check_service(address)

    # The demo spec's fields as a dict; the coordinator fills in the rest.
    with open(os.path.join(source_dir, "examples", "demo.yaml")) as f:
        spec = yaml.safe_load(f)
    spec["train"]["steps"] = STEPS
    spec["checkpoint"] = {"every_steps": STEPS // 3, "keep": 2}
    spec["data"]["path"] = os.path.join(source_dir, "examples", spec["data"]["path"])
    check_bad_specs(client, spec)
    job_id = check_submit(client, spec)
    error = expect_error(grpc.StatusCode.NOT_FOUND, client.export, job_id, step=7)
    check("no complete checkpoint of step 7" in error.message, f"export step 7: {error}")
    expect_error(grpc.StatusCode.NOT_FOUND, client.profile, job_id)

    check_events(client, job_id)
    final = client.status(job_id)
    check(isinstance(final.state, fsdpd.JobState) and final.state == common_pb2.SUCCEEDED,
          f"job ended {final.state}: {final.reason}")
    check(str(final).startswith(f"{job_id} {spec['name']} SUCCEEDED"), f"job prints {final}")
    check([t.state for t in final.transitions][-1] == fsdpd.JobState.SUCCEEDED,
          f"transitions {[str(t) for t in final.transitions]}")
    check_logs(client, job_id)
    listed = list(client.list(page_size=1))
    check([j.id for j in listed] == [job_id], f"list pages to {[j.id for j in listed]}")
    check(list(client.list(states=[fsdpd.JobState.RUNNING])) == [], "list by state")

    weights = client.export_state_dict(job_id)
    model = spec["model"]
    shapes = {tuple(array.shape) for array in weights.values()}
    check((model["vocab"], model["dim"]) in shapes, f"no embedding among {shapes}")
    check(all(array.size and (array == array).all() for array in weights.values()),
          "exported weights are empty or NaN")
    print(f"python client: job {job_id} SUCCEEDED after {STEPS} steps; exported "
          f"{len(weights)} tensors, {sum(a.size for a in weights.values())} parameters")
    check_checkpoints(client, job_id)
    check_manage(client, job_id)
    check_example(address, source_dir)


def check_manage(client, job_id):
    """resubmit with overrides and labels, its origin, list by label, the attempts record, and
    cancel with a reason."""
    first = client.status(job_id)
    check(len(first.attempts) == 1 and first.attempts[0].number == 1, f"{first.attempts}")
    attempt = first.attempts[0]
    check(len(attempt.ranks) == 2 and all(worker and host for _, worker, host in attempt.ranks),
          f"attempt ranks {attempt.ranks}")
    check(attempt.end_time is not None and attempt.final_step == STEPS, f"attempt {attempt}")
    # On cuda, which this cluster lacks: it waits, and leaves the CPU workers to the example.
    again = client.resubmit(job_id, set={"train.lr": "1e-4", "parallel.device": "cuda",
                                         "parallel.param_dtype": "bf16"}, labels={"try": "2"})
    job = again.job
    check(job.id != job_id and job.uid != first.uid, "resubmit made no new job")
    check(job.origin.resubmitted_from == job_id and
          job.origin.overrides == ["train.lr=1e-4", "parallel.device=cuda",
                                   "parallel.param_dtype=bf16"], f"{job.origin}")
    check(job.spec.train.lr == 1e-4 and job.spec.parallel.device == "cuda" and
          job.spec.model == first.spec.model, f"resubmitted spec {job.spec}")
    check(job.state == fsdpd.JobState.PENDING, f"{job}")
    # The reply shows the job as submitted; the scheduling pass, which runs right after it
    # answers, gives the reason it waits.
    waiting = wait_for_reason(client, job.id, "cuda", time.time() + 30)
    check(waiting.state == fsdpd.JobState.PENDING, f"{waiting}")
    check(job.labels == {"try": "2"}, f"labels {job.labels}")
    check([j.id for j in client.list(labels={"try": "2"})] == [job.id], "list by label")
    check(list(client.list(labels={"try": "3"})) == [], "list by another label")
    try:
        client.resubmit(job_id, set={"train.lrr": 1})
        raise AssertionError("an override of no field was accepted")
    except fsdpd.SpecError as error:
        check("train.lrr" in str(error), f"override error {error}")
    error = expect_error(grpc.StatusCode.INVALID_ARGUMENT, client.submit, first.spec,
                         labels={"bad key": "x"})
    check(any(v.field == 'labels["bad key"]' for v in error.violations), f"{error.violations}")
    cancelled = client.cancel(job.id, reason="python says stop")
    check(cancelled.transitions[-1].reason == "python says stop",
          f"cancel reason {cancelled.transitions[-1]}")
    print(f"python client: resubmitted {job_id} as {job.id} with its origin; labels, attempts "
          "and cancel reasons read back")
def check_sharded_job(client, source_dir, folder):
    """fsdpd.data.write_shards turns the demo's text into shards and a manifest, and a job with
    gradient accumulation trains on them through the daemon, each step over every micro-batch."""
    from fsdpd.data import write_shards
    with open(os.path.join(source_dir, "examples", "tiny_corpus.txt"), encoding="utf-8") as f:
        text = f.read()
    manifest = write_shards(text, os.path.join(folder, "shards"), shard_tokens=1024)
    with open(manifest) as f:
        listed = [line.split("\t") for line in f if not line.startswith("#")]
    check(len(listed) >= 2 and sum(int(count) for _, count in listed) == len(text.encode()),
          f"the manifest lists {listed}")
    with open(os.path.join(source_dir, "examples", "demo.yaml")) as f:
        spec = yaml.safe_load(f)
    spec["name"] = "sharded-python"
    spec["data"] = {"source": "tokens", "path": str(manifest), "seq_len": 32, "token_bytes": 2,
                    "eval_path": str(manifest), "eval_every": 2, "eval_batches": 2}
    spec["train"].update(steps=4, batch_size=2, grad_accum_steps=2)
    job = client.submit(spec)
    steps = [e for e in client.watch(job.id) if isinstance(e, fsdpd.StepEvent)]
    final = client.status(job.id)
    check(final.state == fsdpd.JobState.SUCCEEDED, f"the sharded job ended {final}: {final.reason}")
    check(final.spec.train.grad_accum_steps == 2, f"stored spec {final.spec.train}")
    check([e.step for e in steps][-1:] == [4], f"sharded job steps {[str(e) for e in steps]}")
    validated = [e for e in steps if e.eval_loss is not None]
    check([e.step for e in validated] == [2, 4] and all(" eval loss " in str(e) for e in validated),
          f"validation on steps {[str(e) for e in validated]}")
    print(f"python client: sharded job {job.id} SUCCEEDED on {len(listed)} shards")


def check_example(address, source_dir):
    """python/examples/train_and_export.py, as a user runs it: one line per event, then the
    exported tensors."""
    with tempfile.TemporaryDirectory(prefix="fsdpd-python-example-") as out:
        weights = os.path.join(out, "demo.safetensors")
        result = subprocess.run(
            [sys.executable, os.path.join(source_dir, "python", "examples", "train_and_export.py"),
             os.path.join(source_dir, "examples", "demo.yaml"), "--steps", "5", "--out", weights],
            env=dict(os.environ, FSDPD_COORDINATOR=address), capture_output=True, text=True,
            timeout=240)
        check(result.returncode == 0, f"the example failed:\n{result.stdout}{result.stderr}")
        lines = result.stdout.splitlines()
        check(any(line.startswith("step 5/5 ") for line in lines) and
              any(line.startswith("state SUCCEEDED") for line in lines),
              f"the example printed:\n{result.stdout}")
        check(os.path.getsize(weights) > 0, "the example wrote no weights")
        print(f"python example: {len(lines)} lines, the last {lines[-1]!r}")


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]))
