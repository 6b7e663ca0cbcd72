"""The Python client against a real coordinator with two CPU workers on loopback.

A program that uses only the fsdpd package submits the demo spec's fields (examples/demo.yaml,
fewer steps) as a dict, watches the job to SUCCEEDED and exports its weights into numpy arrays
(no torch here). On the way it checks the server-side defaults, the BadRequest field violations,
the codes of issue-prone calls, per-service health and server reflection.

usage: python_client_test.py BUILD_DIR SOURCE_DIR   (the package on PYTHONPATH)
"""
import os
import socket
import subprocess
import sys
import tempfile
import time

import grpc
import yaml

import fsdpd
from fsdpd.v1 import common_pb2

STEPS = 30


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check(condition, message):
    if not condition:
        raise AssertionError(message)


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
    check = channel.unary_unary("/grpc.health.v1.Health/Check")
    answer = check(b"\x0a" + bytes([len(name)]) + name, timeout=10)
    return answer  # HealthCheckResponse{status: SERVING=1} is b"\x08\x01"


def wait_for_workers(client, count, deadline):
    while time.time() < deadline:
        try:
            if sum(1 for w in client.workers() if w.state == common_pb2.IDLE) >= count:
                return
        except fsdpd.FsdpdError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{count} workers did not register")


def check_relative_paths(folder):
    """load_spec resolves every path field (the file_path option of proto/fsdpd/v1/spec.proto,
    which fsdpctl, the validator and the workers read too) against the YAML file's folder."""
    from fsdpd import client as client_module
    fields = client_module._path_fields()
    # The same list as spec_path_fields_test's, read from the same option.
    check(fields == [("data", "path"), ("checkpoint", "init_from")], f"path fields {fields}")
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
    folder = tempfile.mkdtemp(prefix="fsdpd-python-")
    check_relative_paths(folder)
    address = f"127.0.0.1:{free_port()}"
    logs = open(os.path.join(folder, "processes.log"), "w")
    processes = [subprocess.Popen(
        [os.path.join(build_dir, "server", "fsdpd"), "--listen", address, "--metrics-listen",
         f"127.0.0.1:{free_port()}", "--state-dir", os.path.join(folder, "state")],
        stdout=logs, stderr=subprocess.STDOUT)]
    for rank in range(2):
        processes.append(subprocess.Popen(
            [os.path.join(build_dir, "worker", "fsdpd-worker"), "--coordinator", address,
             "--device", "cpu", "--checkpoint-root", os.path.join(folder, "checkpoints"),
             "--hostname", f"py-worker-{rank}", "--heartbeat-interval", "500ms",
             "--allowed-root", source_dir],
            stdout=logs, stderr=subprocess.STDOUT))
    try:
        run(address, source_dir)
    except BaseException:
        logs.flush()
        with open(os.path.join(folder, "processes.log")) as f:
            sys.stderr.write(f.read()[-8000:])
        raise
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(timeout=30)


def run(address, source_dir):
    client = fsdpd.Client(address)
    wait_for_workers(client, 2, time.time() + 60)

    # Health by service name, and reflection lists the services without .proto files.
    channel = grpc.insecure_channel(address)
    for service in ("", "fsdpd.v1.JobService", "fsdpd.v1.WorkerService",
                    "fsdpd.v1.RendezvousService"):
        check(health(channel, service) == b"\x08\x01", f"health of '{service}' is not SERVING")
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    answers = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    services = {s.name for a in answers for s in a.list_services_response.service}
    check("fsdpd.v1.JobService" in services, f"reflection lists {services}")

    # The demo spec's fields as a dict; the coordinator fills in the rest.
    with open(os.path.join(source_dir, "examples", "demo.yaml")) as f:
        spec = yaml.safe_load(f)
    spec["train"]["steps"] = STEPS
    spec["data"]["path"] = os.path.join(source_dir, "examples", spec["data"]["path"])

    # A bad spec: INVALID_ARGUMENT with one BadRequest violation per field.
    bad = dict(spec, model=dict(spec["model"], dim=30), train=dict(spec["train"], lr=-1))
    error = expect_error(grpc.StatusCode.INVALID_ARGUMENT, client.submit, bad)
    fields = {field for field, _ in error.violations}
    check({"model.dim", "train.lr"} <= fields, f"violations name {fields}")
    expect_error(grpc.StatusCode.INVALID_ARGUMENT, client.status, "")

    job = client.submit(spec)
    check(job.id and job.state in (common_pb2.PENDING, common_pb2.SCHEDULED), f"submit answered {job}")
    # The stored spec holds the defaults the job runs with, and keeps an explicit 0.
    check(job.spec.train.eps == 1e-8 and job.spec.train.lr_schedule == "constant",
          f"defaults not applied: {job.spec.train}")
    check(job.spec.parallel.reshard_after_forward, "reshard_after_forward default is true")
    check(job.spec.profile.HasField("steps") and job.spec.profile.steps == 0,
          "profile.steps: 0 must stay 0")
    check(job.HasField("create_time"), "create_time is set")
    check(client.status(job.id).spec == job.spec, "GetJob's spec differs from SubmitJob's")
    expect_error(grpc.StatusCode.FAILED_PRECONDITION, client.export, job.id)
    expect_error(grpc.StatusCode.NOT_FOUND, client.profile, job.id)

    steps = []
    for event in client.watch(job.id):
        if event.HasField("step"):
            steps.append(event.step.step)
    final = client.status(job.id)
    check(final.state == common_pb2.SUCCEEDED, f"job ended {common_pb2.JobState.Name(final.state)}: {final.reason}")
    check(steps and steps[-1] == STEPS, f"watched steps end at {steps[-1:]}")
    check(any(line.text for line in client.logs(job.id)), "the job has no log lines")
    listed = list(client.list(page_size=1))
    check([j.id for j in listed] == [job.id], f"list pages to {[j.id for j in listed]}")

    weights = client.export_state_dict(job.id)
    model = spec["model"]
    shapes = {tuple(array.shape) for array in weights.values()}
    check((model["vocab"], model["dim"]) in shapes, f"no embedding among {shapes}")
    check(all(array.size and (array == array).all() for array in weights.values()),
          "exported weights are empty or NaN")
    print(f"python client: job {job.id} SUCCEEDED after {STEPS} steps; exported "
          f"{len(weights)} tensors, {sum(a.size for a in weights.values())} parameters")


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]))
