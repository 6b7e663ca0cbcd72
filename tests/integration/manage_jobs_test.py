"""Managing jobs through the real fsdpd, fsdpd-worker and fsdpctl on loopback.

- Labels: submit --label stores them, list --label selects exactly the jobs with every label,
  a bad label is refused naming it, and the labels survive a coordinator restart.
- cancel --reason: the reason is the CANCELLED transition's, shown by describe.
- Why a job waits: a spec of only a name (device cuda by default) on a CPU-only cluster says,
  within a scheduling pass, that it waits for cuda workers and what is idle; a job behind a
  higher-priority one names that job.
- resubmit --set: a new job whose stored spec has the overrides and is otherwise equal; its
  origin is shown by describe and GetJob (status --json); a bad path or type is named.
- resubmit --from: an unknown origin job, a different model, a spec that sets
  checkpoint.init_from_job_uid itself, and checkpoint.init_from with --from are each refused
  naming the field. (That the stored spec carries the origin's uid and step is the unit test
  JobManagerOriginTest's, with a recorded checkpoint.)
- Attempts: a job whose worker is killed is retried; GetJob shows two attempts on different
  workers with their hosts, the first ended with the loss of its worker.
- describe of an unknown id says the job is not found.

usage: manage_jobs_test.py SOURCE_DIR BUILD_DIR
"""
import json
import os
import re
import signal
import sys
import time

from local_cluster import Sandbox, check, wait_until


def spec_text(name, steps=4, world_size=1, priority=0, dim=32, max_restarts=0, every_steps=0):
    return f"""name: {name}
model: {{vocab: 64, dim: {dim}, layers: 1, heads: 2, ffn_mult: 2}}
data: {{source: synthetic, seq_len: 16}}
train: {{batch_size: 2, steps: {steps}, lr: 1.0e-3, seed: 1}}
parallel: {{world_size: {world_size}, device: cpu, param_dtype: fp32, reduce_dtype: fp32}}
checkpoint: {{every_steps: {every_steps}}}
max_restarts: {max_restarts}
priority: {priority}
"""


def write(sandbox, name, text):
    path = os.path.join(sandbox.dir, f"{name}.yaml")
    with open(path, "w") as file:
        file.write(text)
    return path


def submit(sandbox, path, *args):
    result = sandbox.ctl("--json", "submit", path, *args)
    check(result.returncode == 0, f"submit {path} {args}: {result.stderr}")
    return json.loads(result.stdout)["id"]


def status(sandbox, job):
    return sandbox.ctl_json("status", job)


def listed(sandbox, *args):
    return sorted(job["id"] for job in sandbox.ctl_json(*args)["jobs"])


def refused(sandbox, *args, words=()):
    result = sandbox.ctl(*args)
    check(result.returncode != 0, f"fsdpctl {' '.join(args)} succeeded: {result.stdout}")
    for word in words:
        check(word in result.stderr, f"fsdpctl {' '.join(args)}: {word!r} not in {result.stderr!r}")
    return result.stderr


def start_coordinator(sandbox, log_name):
    process = sandbox.start([sandbox.binary("fsdpd"), "--state-dir",
                             os.path.join(sandbox.dir, "state"), "--heartbeat-timeout", "3s"],
                            log_name)
    wait_until(sandbox.serving, 30, "the coordinator")
    return process


def start_worker(sandbox, host):
    return sandbox.start([sandbox.binary("fsdpd-worker"), "--device", "cpu", "--hostname", host,
                          "--heartbeat-interval", "500ms", "--allowed-root", sandbox.dir],
                         f"worker-{host}.log")


def check_waiting_for_cuda(sandbox):
    path = write(sandbox, "name-only", "name: name-only\n")
    job = submit(sandbox, path)
    started = time.monotonic()
    state = wait_until(lambda: (lambda s: s if "cuda" in s["reason"] else None)(status(sandbox, job)),
                       5, "the name-only job to say why it waits")
    reason = state["reason"]
    print(f"name-only job after {time.monotonic() - started:.1f} s: {state['state']}: {reason}")
    check(state["state"] == "PENDING", f"state {state['state']}")
    check(re.search(r"needs \d+ cuda workers?; the fleet has 0 registered", reason),
          f"the reason does not say it waits for a cuda worker: {reason!r}")
    check("idle now: 2 cpu workers, 0 cuda" in reason, f"the reason does not say what is idle: "
          f"{reason!r}")
    result = sandbox.ctl("cancel", job, "--reason", "no gpus in this test")
    check(result.returncode == 0, f"cancel --reason: {result.stderr}")
    final = status(sandbox, job)
    check(final["state"] == "CANCELLED", f"after cancel: {final['state']}")
    last = final["transitions"][-1]
    check(last["reason"] == "no gpus in this test", f"the transition's reason: {last}")
    described = sandbox.ctl("describe", job)
    check(described.returncode == 0 and "no gpus in this test" in described.stdout,
          f"describe does not show the cancel reason: {described.stdout}{described.stderr}")
    print("name-only job: waits for cuda naming what is idle; cancel --reason recorded")


def check_held_behind(sandbox):
    # Both workers busy with one long job; a priority-5 job waits for them, and a later one waits
    # behind it.
    long_job = submit(sandbox, write(sandbox, "long", spec_text("long", steps=100000,
                                                                world_size=2)))
    wait_until(lambda: status(sandbox, long_job)["state"] in ("SCHEDULED", "RUNNING"), 30,
               "the long job to start")
    high = submit(sandbox, write(sandbox, "high", spec_text("high", priority=5)))
    low = submit(sandbox, write(sandbox, "low", spec_text("low", priority=0)))
    reason = wait_until(lambda: (lambda r: r if high in r else None)(status(sandbox, low)["reason"]),
                        5, "the low job to name the job it waits behind")
    print(f"low job: {reason}")
    check(f"busy with {long_job}" in reason, f"the low job's reason: {reason!r}")
    check(f"behind {high} (priority 5)" in reason, f"the low job's reason: {reason!r}")
    high_reason = status(sandbox, high)["reason"]
    check(f"2 busy with {long_job}" in high_reason and "behind" not in high_reason,
          f"the high job's reason: {high_reason!r}")
    for job in (long_job, high, low):
        sandbox.ctl("cancel", job)
    wait_until(lambda: sandbox.idle_workers() >= 2, 30, "the workers to be idle again")
    print("held behind a higher-priority job: names it and the busy workers' job")


def check_labels(sandbox):
    path = write(sandbox, "labelled", spec_text("labelled", steps=2))
    a = submit(sandbox, path, "--label", "team=nlp", "--label", "sweep=lr")
    b = submit(sandbox, path, "--label", "team=nlp")
    c = submit(sandbox, path, "--label", "team=vision", "--label", "sweep=lr")
    check(status(sandbox, a)["labels"] == {"team": "nlp", "sweep": "lr"},
          f"labels of {a}: {status(sandbox, a)['labels']}")
    check(listed(sandbox, "list", "--label", "team=nlp") == sorted([a, b]), "list team=nlp")
    check(listed(sandbox, "list", "--label", "team=nlp", "--label", "sweep=lr") == [a],
          "list team=nlp sweep=lr")
    check(listed(sandbox, "list", "--label", "sweep=lr") == sorted([a, c]), "list sweep=lr")
    check(listed(sandbox, "list", "--label", "team=none") == [], "list team=none")
    refused(sandbox, "submit", path, "--label", "bad key=x",
            words=('labels["bad key"]', "letters, digits"))
    refused(sandbox, "submit", path, "--label", "k=" + "v" * 64,
            words=('labels["k"]', "64 characters long; at most 63"))
    refused(sandbox, "submit", path, "--label", "novalue", words=("--label novalue", "key=value"))
    refused(sandbox, "list", "--label", "-bad=1", words=('labels["-bad"]', "begin and end"))
    shown = sandbox.ctl("status", a).stdout
    check("labels     sweep=lr, team=nlp" in shown, f"status does not show labels: {shown}")
    print("labels: stored, selected exactly, bad ones named")
    return a, b, c


def check_resubmit(sandbox, original):
    result = sandbox.ctl("--json", "resubmit", original, "--set", "train.lr=1e-4", "--set",
                         "parallel.world_size=2", "--label", "try=2")
    check(result.returncode == 0, f"resubmit: {result.stderr}")
    again = json.loads(result.stdout)["id"]
    check(again != original, "resubmit returned the same id")
    old, new = status(sandbox, original), status(sandbox, again)
    check(new["uid"] != old["uid"], "the resubmitted job has the same uid")
    check(new["spec"]["train"]["lr"] == 1e-4, f"lr: {new['spec']['train']}")
    check(new["spec"]["parallel"]["world_size"] == 2, f"world_size: {new['spec']['parallel']}")
    expected = json.loads(json.dumps(old["spec"]))
    expected["train"]["lr"] = 1e-4
    expected["parallel"]["world_size"] = 2
    check(new["spec"] == expected, f"the spec differs beyond the overrides:\n{old['spec']}\n"
          f"{new['spec']}")
    check(new["labels"] == dict(old["labels"], **{"try": "2"}), f"labels: {new['labels']}")
    check(new["origin"]["resubmitted_from"] == original and
          new["origin"]["overrides"] == ["train.lr=1e-4", "parallel.world_size=2"],
          f"origin: {new['origin']}")
    described = sandbox.ctl("describe", again)
    check(described.returncode == 0, f"describe {again}: {described.stderr}")
    text = described.stdout
    print(text)
    check(f"origin: resubmitted from {original} with train.lr=1e-4 parallel.world_size=2" in text,
          f"describe does not show the origin:\n{text}")
    check("checkpoints: not available from this coordinator" in text or "checkpoints" in text,
          f"describe has no checkpoints section:\n{text}")
    check(all(len(line) <= 80 for line in text.splitlines()),
          f"describe is wider than 80 columns:\n{text}")
    refused(sandbox, "resubmit", original, "--set", "train.lrr=1",
            words=('--set train.lrr=1', 'no field "lrr" in train', "lr"))
    refused(sandbox, "resubmit", original, "--set", "train.steps=abc",
            words=("train.steps takes an integer", '"abc"'))
    refused(sandbox, "resubmit", original, "--set", "train=1", words=("train is a section",))
    refused(sandbox, "resubmit", original, "--set", "train.steps=-5",
            words=("train.steps",))  # the coordinator's validator
    print("resubmit --set: overrides applied, origin recorded and shown, bad ones named")
    return again


def check_from_errors(sandbox, original):
    refused(sandbox, "resubmit", original, "--from", "job-999999",
            words=("origin.weights_from.job_id", 'no job with id "job-999999"'))
    other = submit(sandbox, write(sandbox, "wider", spec_text("wider", steps=2, dim=64)))
    refused(sandbox, "resubmit", original, "--from", other,
            words=("model", "model.dim is 32 here but 64 in " + other))
    refused(sandbox, "resubmit", original, "--from", f"{original}@abc",
            words=("positive checkpoint step",))
    refused(sandbox, "resubmit", original, "--from", original, "--set",
            "checkpoint.init_from=/tmp/x.safetensors", words=("checkpoint.init_from", "--from"))
    refused(sandbox, "resubmit", original, "--set", "checkpoint.init_from_job_uid=abc",
            words=("checkpoint.init_from_job_uid", "set by the coordinator from --from"))
    # Without a checkpoint catalog the coordinator says it cannot resolve one.
    refused(sandbox, "resubmit", original, "--from", f"{original}@2",
            words=("origin.weights_from",))
    print("resubmit --from: each bad origin named")


def check_attempts(sandbox, workers):
    wait_until(lambda: sandbox.idle_workers() >= 2, 60, "both workers idle")
    job = submit(sandbox, write(sandbox, "retried", spec_text("retried", steps=100000,
                                                              max_restarts=1)))
    first = wait_until(lambda: (lambda s: s if s["state"] == "RUNNING" else None)(
        status(sandbox, job)), 60, "the job to run")
    victim = first["worker_ids"][0]
    host = next(w["hostname"] for w in sandbox.ctl_json("workers")["workers"] if w["id"] == victim)
    os.killpg(workers[host].pid, signal.SIGKILL)
    second = wait_until(lambda: (lambda s: s if s["attempt"] == 2 and s["state"] in
                                 ("SCHEDULED", "RUNNING") else None)(status(sandbox, job)), 60,
                        "the second attempt")
    attempts = second["attempts"]
    print(json.dumps(attempts, indent=1))
    check(len(attempts) == 2, f"attempts: {attempts}")
    check([a["number"] for a in attempts] == [1, 2], f"numbers: {attempts}")
    one, two = attempts[0]["ranks"][0], attempts[1]["ranks"][0]
    check(one["worker_id"] == victim and one["hostname"] == host, f"attempt 1: {attempts[0]}")
    check(two["worker_id"] != victim and two["hostname"] and two["hostname"] != host,
          f"attempt 2: {attempts[1]}")
    check(attempts[0]["end_time"] and "lost" in attempts[0]["outcome"],
          f"attempt 1 did not end with its lost worker: {attempts[0]}")
    check(not attempts[1].get("end_time"), f"attempt 2 ended: {attempts[1]}")
    described = sandbox.ctl("describe", job).stdout
    check(f"attempt 1 on 0:{victim}@{host}" in described, f"describe attempts:\n{described}")
    sandbox.ctl("cancel", job)
    print("attempts: two, on different workers and hosts; the first ended with its lost worker")
    return host


def main(source_dir, build_dir):
    sandbox = Sandbox(build_dir, "fsdpd-manage-")
    sandbox.use_ports()
    ok = False
    try:
        coordinator = start_coordinator(sandbox, "fsdpd.log")
        workers = {host: start_worker(sandbox, host) for host in ("manage-0", "manage-1")}
        wait_until(lambda: sandbox.idle_workers() >= 2, 60, "two idle workers")

        result = sandbox.ctl("describe", "job-424242")
        check(result.returncode != 0 and "job-424242" in result.stderr and
              "not found" in result.stderr, f"describe of an unknown id: {result.stderr!r}")

        failures = []
        labelled = []
        for name, run in [
                ("waiting for cuda", lambda: check_waiting_for_cuda(sandbox)),
                ("held behind", lambda: check_held_behind(sandbox)),
                ("labels", lambda: labelled.extend(check_labels(sandbox))),
                ("resubmit", lambda: check_resubmit(sandbox, labelled[0] if labelled else
                                                    "job-000001")),
                ("resubmit --from", lambda: check_from_errors(sandbox, labelled[0] if labelled
                                                              else "job-000001")),
                ("attempts", lambda: check_attempts(sandbox, workers))]:
            try:
                run()
            except AssertionError as error:
                print(f"FAILED {name}: {error}")
                failures.append(name)
        # The labels survive a restart of the coordinator.
        if labelled:
            os.killpg(coordinator.pid, signal.SIGTERM)
            coordinator.wait(timeout=30)
            start_coordinator(sandbox, "fsdpd-restarted.log")
            a, b, c = labelled
            try:
                check(listed(sandbox, "list", "--label", "team=vision") == [c],
                      "list team=vision after a restart")
                nlp = listed(sandbox, "list", "--label", "team=nlp")
                check(a in nlp and b in nlp and c not in nlp, "list team=nlp after a restart")
                check(status(sandbox, a)["labels"] == {"team": "nlp", "sweep": "lr"},
                      "labels after a restart")
                print("labels: kept across a coordinator restart")
            except AssertionError as error:
                print(f"FAILED labels after restart: {error}")
                failures.append("labels after restart")
        check(not failures, f"failed: {', '.join(failures)}")
        ok = True
    finally:
        sandbox.finish(ok)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
