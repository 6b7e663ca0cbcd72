"""Hosts that do not share a checkpoint root, on network namespaces with per-host roots.

- Placement: two hosts, each worker with a root of its own (two root identities). A world-2 job
  is not placed: it waits in PENDING and `fsdpctl status` says it needs workers that share one
  checkpoint root, and how to give them one.
- A root whose identity was copied (a cloned disk image: one identity, two roots) passes
  placement; the job then fails at its first checkpoint, at once and without a retry although
  max_restarts allows three, with a message naming the missing shard and the remedy.
- A job is not pinned to the root its checkpoints are on: a retry placed on workers of another
  root finds no checkpoint and starts again from step 0, but never without saying so (rank 0's
  log: "attempt 2 finds no checkpoint in ...; starting from step 0").

usage: hosts_checkpoint_roots_test.py SOURCE_DIR BUILD_DIR
"""
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_hosts import Cluster, check, wait_until  # noqa: E402

ROOT_ID = ".fsdpd-root-id"


def retry_on_another_root(build_dir):
    """Two hosts, two workers each, each host's pair sharing a root of its own. The job's first
    attempt runs on one host and commits a checkpoint; one of its workers dies, and the retry can
    only go to the other host's pair, whose root has no checkpoint: the job starts again from step
    0, and says so."""
    with Cluster(build_dir, hosts=2) as cluster:
        roots = [os.path.join(cluster.dir, f"root-host-{i}") for i in range(2)]
        cluster.start_coordinator()
        for host in range(2):
            for slot in range(2):
                cluster.start_worker(host, f"h{host}-{slot}", roots[host])
        cluster.wait_for_idle(4)
        job_id = cluster.submit(
            cluster.write_spec("moved", 2, 3000, checkpoint_every=100, max_restarts=1))
        wait_until(lambda: cluster.job(job_id)["step"] >= 150, 60, f"{job_id} to pass step 150")
        first = cluster.job(job_id)
        busy = {w["id"]: w for w in cluster.ctl_json("workers")["workers"] if w["state"] == "BUSY"}
        host = busy[first["worker_ids"][1]]["hostname"]
        victim = next(name for name, (namespace, _) in cluster.workers.items()
                      if namespace == cluster.host(int(host.split("-")[1])) and
                      f"{busy[first['worker_ids'][1]]['id']}" in cluster.log_text(f"{name}.log"))
        cluster.workers[victim][1].kill()
        done = cluster.wait_for_state(job_id, ("SUCCEEDED", "FAILED"), 180)
        check(done["state"] == "SUCCEEDED" and done["attempt"] == 2, f"{job_id}: {done}")
        logs = cluster.logs_of(job_id)
        said = "attempt 2 finds no checkpoint in "
        check(said in logs and "starting from step 0" in logs,
              f"{job_id} started again from step 0 without saying so:\n{logs[-3000:]}")
        check("resumed from the checkpoint" not in logs, "the retry found a checkpoint")
        line = next(line for line in logs.splitlines() if said in line)
        print(f"retry on another root: {job_id} says: {line.strip()}")


def main():
    build_dir = sys.argv[2]
    started = time.monotonic()
    retry_on_another_root(build_dir)
    with Cluster(build_dir, hosts=2) as cluster:
        roots = [os.path.join(cluster.dir, f"root-host-{i}") for i in range(2)]
        cluster.start_coordinator()
        cluster.start_worker(0, "h0", roots[0])
        cluster.wait_for_idle(1)
        cluster.start_worker(1, "h1", roots[1])
        cluster.wait_for_idle(2)

        job_id = cluster.submit(
            cluster.write_spec("apart", 2, 60, checkpoint_every=5, max_restarts=3))
        held = wait_until(
            lambda: (lambda job: job if "share one checkpoint root" in job["reason"] else None)(
                cluster.job(job_id)), cluster.heartbeat_timeout_s + 20,
            "the job to say it waits for workers sharing a root")
        check(held["state"] == "PENDING" and held["attempt"] == 0, f"held job: {held}")
        check("--checkpoint-root on a shared file system" in held["reason"], held["reason"])
        text = cluster.ctl("status", job_id).stdout
        check("share one checkpoint root" in text, f"fsdpctl status does not say why:\n{text}")
        print(f"placement: {job_id} waits: {held['reason']}")

        # Host 1's root gets host 0's identity, as a cloned image would: placement cannot tell.
        _, process = cluster.workers.pop("h1")
        process.terminate()
        process.wait(timeout=30)
        shutil.copyfile(os.path.join(roots[0], ROOT_ID), os.path.join(roots[1], ROOT_ID))
        cluster.start_worker(1, "h1-cloned", roots[1])
        done = cluster.wait_for_state(job_id, ("FAILED", "SUCCEEDED", "CANCELLED"), 120)
        states = [change["state"] for change in done["transitions"]]
        check(done["state"] == "FAILED", f"{job_id}: {done['state']}: {done['reason']}")
        check(done["attempt"] == 1 and "RETRYING" not in states,
              f"{job_id} was retried: attempt {done['attempt']}, states {states}")
        # Rank 0 looks in its own root, host 0's or host 1's: whichever host the gang gave it.
        missing = [os.path.join(root, done["uid"], "step-00000005", "rank-00001.bin")
                   for root in roots[:2]]
        check(any(f"does not find rank 1's file {path}" in done["reason"] for path in missing),
              f"the failure does not name rank 1's file in rank 0's root: {done['reason']}")
        for words in ("do not share one checkpoint root",
                      "same --checkpoint-root on a file system all their hosts mount",
                      "not retried"):
            check(words in done["reason"], f"the failure does not say {words!r}: "
                  f"{done['reason']}")
        check(done["step"] <= 5, f"{job_id} went on past its first checkpoint: {done['step']}")
        print(f"shared identity, separate roots: {job_id} failed once: {done['reason']}")
        print(f"hosts_checkpoint_roots: passed in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
