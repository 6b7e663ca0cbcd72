"""What fsdpctl and fsdpd say, through the real programs on loopback.

- A word that is no fsdpctl verb is named, with the verbs there are.
- The health port (--health-listen) answers grpc.health.v1 and nothing else, reflection
  included; the main port keeps reflection.
- A CPU job's kernel table says it is an estimate, has no SM/HBM columns and no GPU remedies,
  and every remedy line names its verdict.
- GetProfile and GetTrace without a window advise what works for the job's state: a finished
  job cannot be profiled any more; a pending one can once it runs.
- A bad ListJobs page_token names the field once; a page_size above 1000 is served as 1000 jobs
  with a next_page_token, as README and jobs.proto say.
- fsdpd restarted at once after a SIGTERM waits for the old one's metrics port; a metrics port
  held for good is named, with the flag that moves it.

usage: cli_messages_test.py SOURCE_DIR BUILD_DIR
"""
import os
import re
import signal
import socket
import sys
import time

import grpc

from local_cluster import Sandbox, check, free_port, generate_stubs, wait_until

GPU_WORDS = ("SM %", "HBM %", "Triton", "FP8", "NVFP4", "INT4", "Tensor Core", "bigger GPU",
             "bf16 parameters")
VERDICTS = ("memory-bound", "compute-bound", "latency-or-mixed", "communication")


def verbs_from_help(sandbox):
    text = sandbox.ctl("--help").stdout
    section = text.split("Subcommands:", 1)[1]
    return [line.split()[0] for line in section.splitlines() if line.startswith("  ")]


def check_unknown_verb(sandbox):
    result = sandbox.ctl("frobnicate", "job-000001")
    check(result.returncode != 0, "an unknown verb succeeded")
    check("unknown command 'frobnicate'" in result.stderr, f"unknown verb: {result.stderr!r}")
    check("subcommand is required" not in result.stderr, f"unknown verb: {result.stderr!r}")
    verbs = verbs_from_help(sandbox)
    check(len(verbs) >= 5 and all(verb in result.stderr for verb in verbs),
          f"the verbs {verbs} are not all listed in {result.stderr!r}")
    # The same with the global options first.
    result = sandbox.ctl("--json", "--coordinator", "127.0.0.1:1", "frobnicate")
    check("unknown command 'frobnicate'" in result.stderr, f"after options: {result.stderr!r}")
    print("unknown verb: named, with the verbs")


def reflection_call(address):
    """ServerReflectionInfo{list_services: ""} by hand (field 7, length-delimited, empty)."""
    with grpc.insecure_channel(address) as channel:
        call = channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
        try:
            answers = list(call(iter([b"\x3a\x00"]), timeout=10))
            return grpc.StatusCode.OK, b"".join(answers)
        except grpc.RpcError as error:
            return error.code(), b""


def check_health_port(sandbox, health_address):
    with grpc.insecure_channel(health_address) as channel:
        answer = channel.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=10)
    check(answer == b"\x08\x01", f"the health port answers {answer!r}, not SERVING")
    code, _ = reflection_call(health_address)
    check(code == grpc.StatusCode.UNIMPLEMENTED,
          f"reflection on the health port: {code}, expected UNIMPLEMENTED")
    code, answer = reflection_call(sandbox.address)
    check(code == grpc.StatusCode.OK and b"fsdpd.v1.JobService" in answer,
          f"reflection on the main port: {code} {answer[:200]!r}")
    print("health port: grpc.health.v1 only; the main port keeps reflection")


def write_spec(sandbox, name, steps, profile):
    path = os.path.join(sandbox.dir, f"{name}.yaml")
    with open(path, "w") as file:
        file.write(f"""name: {name}
model: {{vocab: 64, dim: 32, layers: 1, heads: 2, ffn_mult: 2}}
data: {{source: synthetic, seq_len: 16}}
train: {{batch_size: 2, steps: {steps}, lr: 1.0e-3, seed: 1}}
parallel: {{world_size: 2, device: cpu, param_dtype: fp32, reduce_dtype: fp32}}
checkpoint: {{every_steps: 0}}
profile: {profile}
max_restarts: 0
""")
    return path


def submit_and_finish(sandbox, spec):
    result = sandbox.ctl("submit", spec, "--watch", timeout=300)
    check(result.returncode == 0, f"submit --watch {spec}: {result.stdout[-2000:]}{result.stderr}")
    return re.search(r"\bjob-\d+\b", result.stdout).group(0)


def check_cpu_profile_table(sandbox):
    job = submit_and_finish(sandbox, write_spec(sandbox, "profiled", 6, "{start_step: 2, steps: 2}"))
    result = sandbox.ctl("profile", job)
    check(result.returncode == 0, f"profile {job}: {result.stderr}")
    text = result.stdout
    print(text)
    lines = text.splitlines()
    check("estimate" in lines[1], f"the CPU table does not say it is an estimate: {lines[:2]}")
    for word in GPU_WORDS:
        check(word not in text, f"the CPU table shows {word!r}")
    check("FLOP % (EST)" in lines[2] and "BW % (EST)" in lines[2], f"columns: {lines[2]}")
    remedies = [line for line in lines if " (e.g. " in line]
    check(remedies, "no remedy lines")
    for line in remedies:
        check(line.split(" (e.g. ")[0] in VERDICTS, f"a remedy line without its verdict: {line}")
    check(any(line.startswith("communication (e.g. ") for line in remedies),
          "no remedy for the collectives of a two-rank job")
    kernels = sandbox.ctl_json("profile", job)["kernels"]
    for kernel in kernels:
        for word in GPU_WORDS:
            check(word not in kernel["remedy"], f"--json remedy of {kernel['name']}: {word!r}")
    print("CPU profile: labelled an estimate, no GPU columns or remedies, verdicts named")


def check_profile_advice(sandbox, stubs):
    finished = submit_and_finish(sandbox, write_spec(sandbox, "unprofiled", 3, "{steps: 0}"))
    for argv in (["profile", finished], ["trace", finished, "-o",
                                         os.path.join(sandbox.dir, "trace.json")]):
        result = sandbox.ctl(*argv)
        check(result.returncode != 0, f"{argv}: succeeded")
        message = result.stderr
        check(f"job {finished} has no" in message and "ended as SUCCEEDED" in message and
              "submit its spec again with profile: {steps: K}" in message,
              f"{argv}: {message!r}")
        check("--steps" not in message and " yet" not in message,
              f"{argv} advises what a finished job cannot do: {message!r}")
    # Jobs that wait (their specs ask for CUDA workers; these are CPU ones): without a window in
    # the spec, and with the default one.
    jobs_pb2, jobs_grpc, spec_pb2 = stubs
    with grpc.insecure_channel(sandbox.address) as channel:
        stub = jobs_grpc.JobServiceStub(channel)
        without = stub.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec_pb2.JobSpec(
            name="waits", profile=spec_pb2.ProfileSpec(steps=0))), timeout=10).id
        default = stub.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec_pb2.JobSpec(
            name="waits-with-window")), timeout=10).id
    result = sandbox.ctl("profile", without)
    check(result.returncode != 0 and "is PENDING" in result.stderr and
          f"once it runs, ask for a window with `fsdpctl profile {without} --steps K`"
          in result.stderr, f"profile of a pending job: {result.stderr!r}")
    result = sandbox.ctl("profile", default)
    check(result.returncode != 0 and "is PENDING" in result.stderr and
          "its spec's window (3 step(s) from step 20) is recorded once it runs" in result.stderr,
          f"profile of a pending job with a window in its spec: {result.stderr!r}")
    print("profile advice: by the job's state")


def bad_request_violations(error):
    from google.rpc import error_details_pb2, status_pb2
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                bad_request = error_details_pb2.BadRequest()
                if detail.Unpack(bad_request):
                    return [(v.field, v.description) for v in bad_request.field_violations]
    return []


def check_page_token_and_size(sandbox, stubs):
    jobs_pb2, jobs_grpc, spec_pb2 = stubs
    with grpc.insecure_channel(sandbox.address) as channel:
        stub = jobs_grpc.JobServiceStub(channel)
        try:
            stub.ListJobs(jobs_pb2.ListJobsRequest(page_size=2, page_token="bogus"), timeout=10)
            raise AssertionError("a bad page_token was accepted")
        except grpc.RpcError as error:
            check(error.code() == grpc.StatusCode.INVALID_ARGUMENT, f"bad token: {error.code()}")
            named = re.findall(r"\bpage_token\b", error.details())
            check(len(named) == 1, f"the message names page_token {len(named)} times: "
                  f"{error.details()!r}")
            violations = bad_request_violations(error)
            check(len(violations) == 1 and violations[0][0] == "page_token" and
                  not re.search(r"\bpage_token\b", violations[0][1]),
                  f"violations: {violations}")

        # page_size above the maximum: 1000 jobs a page, the rest behind next_page_token.
        total = len(stub.ListJobs(jobs_pb2.ListJobsRequest(), timeout=30).jobs)
        request = jobs_pb2.SubmitJobRequest(spec=spec_pb2.JobSpec(name="filler"))
        futures = [stub.SubmitJob.future(request, timeout=120) for _ in range(1001 - total)]
        for future in futures:
            future.result()
        first = stub.ListJobs(jobs_pb2.ListJobsRequest(page_size=5000), timeout=30)
        check(len(first.jobs) == 1000 and first.next_page_token,
              f"page_size 5000: {len(first.jobs)} jobs, token {first.next_page_token!r}")
        rest = stub.ListJobs(
            jobs_pb2.ListJobsRequest(page_size=5000, page_token=first.next_page_token), timeout=30)
        check(len(rest.jobs) == 1 and not rest.next_page_token,
              f"the page after: {len(rest.jobs)} jobs")
    print("page_token named once; page_size 5000 served as 1000 and a next page")


def hold_port():
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder, f"127.0.0.1:{holder.getsockname()[1]}"


def check_restart_waits_for_metrics_port(sandbox, coordinator):
    # A new fsdpd on the same ports right after a SIGTERM, while the old one is still exiting
    # (with workers connected that takes it about two seconds). It gets a state folder of its
    # own: one folder takes one coordinator at a time, and that rule is not what this checks.
    coordinator.send_signal(signal.SIGTERM)
    again = sandbox.start([sandbox.binary("fsdpd"), "--state-dir",
                           os.path.join(sandbox.dir, "state-again")], "fsdpd-again.log")
    wait_until(lambda: "fsdpd listening on" in sandbox.log_text("fsdpd-again.log") or
               again.poll() is not None, 60, "the restarted coordinator")
    check(again.poll() is None, "the restarted coordinator exited:\n" +
          sandbox.log_text("fsdpd-again.log"))
    check(coordinator.wait(timeout=30) == 0, "the old coordinator did not stop cleanly")
    # Whether it had to wait depends on how long the old one took to exit; check_metrics_port_
    # in_use holds a port for certain.
    waited = "is in use; retrying" in sandbox.log_text("fsdpd-again.log")
    print("restart right after SIGTERM: serves once the old one let go of its ports"
          f" ({'waited for' if waited else 'found free'} the metrics port)")


def check_metrics_port_in_use(sandbox):
    argv = [sandbox.binary("fsdpd"), "--listen", "127.0.0.1:0"]
    # Held until fsdpd says it waits, then let go: it starts.
    holder, address = hold_port()
    waiting = sandbox.start(argv + ["--metrics-listen", address, "--state-dir",
                                    os.path.join(sandbox.dir, "state-wait")], "fsdpd-wait.log")
    wait_until(lambda: f"{address} is in use; retrying" in sandbox.log_text("fsdpd-wait.log") or
               waiting.poll() is not None, 30, "fsdpd to wait for its metrics port")
    holder.close()
    wait_until(lambda: "fsdpd listening on" in sandbox.log_text("fsdpd-wait.log") or
               waiting.poll() is not None, 30, "fsdpd to serve once the port is free")
    check(waiting.poll() is None, "fsdpd exited:\n" + sandbox.log_text("fsdpd-wait.log"))
    waiting.send_signal(signal.SIGTERM)
    waiting.wait(timeout=30)

    # Held for good: a bounded wait, then an error naming the port and the flag.
    holder, address = hold_port()
    started = time.monotonic()
    result = sandbox.run(argv + ["--metrics-listen", address, "--state-dir",
                                 os.path.join(sandbox.dir, "state-held")], timeout=120)
    holder.close()
    port = address.rsplit(":", 1)[1]
    check(result.returncode == 1, f"fsdpd on a held metrics port: exit {result.returncode}")
    check(f"port {port} is in use" in result.stderr and address in result.stderr and
          "--metrics-listen" in result.stderr and "null context" not in result.stderr,
          f"held metrics port: {result.stderr!r}")
    print(f"metrics port held: retried, then named ({time.monotonic() - started:.0f} s)")


def main(source_dir, build_dir):
    sandbox = Sandbox(build_dir, "fsdpd-messages-")
    sandbox.use_ports()
    ok = False
    try:
        generate_stubs(source_dir, os.path.join(sandbox.dir, "stubs"))
        from fsdpd.v1 import jobs_pb2, jobs_pb2_grpc, spec_pb2
        stubs = (jobs_pb2, jobs_pb2_grpc, spec_pb2)

        try:
            check_unknown_verb(sandbox)
        except AssertionError as error:  # the rest still runs
            print(f"FAILED unknown verb: {error}")
            unknown_verb_failed = True
        else:
            unknown_verb_failed = False
        health_address = f"127.0.0.1:{free_port()}"
        coordinator = sandbox.start(
            [sandbox.binary("fsdpd"), "--state-dir", os.path.join(sandbox.dir, "state"),
             "--health-listen", health_address], "fsdpd.log")
        wait_until(sandbox.serving, 30, "the coordinator")
        for rank in range(2):
            sandbox.start([sandbox.binary("fsdpd-worker"), "--device", "cpu", "--hostname",
                           f"messages-{rank}"], f"worker{rank}.log")
        wait_until(lambda: sandbox.idle_workers() >= 2, 60, "two idle workers")

        # Each check runs, whatever the one before found; the test fails with all they found.
        failures = []
        for name, run in [
                ("health port", lambda: check_health_port(sandbox, health_address)),
                ("CPU profile table", lambda: check_cpu_profile_table(sandbox)),
                ("profile advice", lambda: check_profile_advice(sandbox, stubs)),
                ("page_token and page_size", lambda: check_page_token_and_size(sandbox, stubs)),
                ("restart", lambda: check_restart_waits_for_metrics_port(sandbox, coordinator)),
                ("metrics port in use", lambda: check_metrics_port_in_use(sandbox))]:
            try:
                run()
            except (AssertionError, grpc.RpcError) as error:
                print(f"FAILED {name}: {error}")
                failures.append(name)
        if unknown_verb_failed:
            failures.insert(0, "unknown verb")
        check(not failures, f"failed: {', '.join(failures)}")
        ok = True
    finally:
        sandbox.finish(ok)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
