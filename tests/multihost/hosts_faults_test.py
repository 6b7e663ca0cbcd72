"""Faults of a network between hosts, each a test with its bound, on network namespaces.

Three hosts, one worker each, one shared checkpoint root, TLS and tokens; the coordinator's
--heartbeat-timeout is HEARTBEAT_S, the ranks' collective timeout (FSDPD_COMM_TIMEOUT_SECONDS)
COMM_S: longer than the longest stall a short partition causes (its length plus TCP's
retransmission backoff, about 6.5 s for 3 s), short enough to bound the abort. A world-2 job runs
on two of the hosts; the third is idle. Scenarios (argv[3]):

- long_partition: rank 1's host is cut off for LONG_S (> HEARTBEAT_S) in the middle of training.
  Bounds: the attempt ends (RETRYING) within HEARTBEAT_S + SLACK_S of the cut. Rank 0, blocked in
  a collective with the silent rank, is cancelled then, but Gloo cannot wake a blocked
  operation: it is free (its worker IDLE) when the collective times out, within COMM_S +
  SLACK_S of the cut. The job resumes from its last complete checkpoint on rank 0's worker and
  the idle host, before the link returns, and SUCCEEDS with the uninterrupted run's final loss;
  every step the resumed attempt reports equals the uninterrupted run's. The cut-off worker is
  back (IDLE) within COMM_S + SLACK_S of the link's return.
- short_partition: rank 1's host is cut off for SHORT_S (< HEARTBEAT_S). No retry: one attempt,
  SUCCEEDED, every step reported once and in order, the uninterrupted run's losses, and the
  stall is visible (a gap of at least SHORT_S - 1 s between two steps).
- coordinator_partition: the coordinator is cut off from every worker for COORDINATOR_CUT_S
  (> HEARTBEAT_S). fsdpd rides it out: every worker going silent at once is a mass silence
  (docs/operations.md "Overload"), which the coordinator does not take for deaths, so no attempt
  ends. The ranks go on training among themselves, their workers buffer the step reports and
  log lines, and resend them once the link returns. Bounds: one attempt, SUCCEEDED, every step
  reported once and in order with the uninterrupted run's losses, the suspension logged; the
  reports buffered during the cut are all stored within CATCH_UP_S of the link's return.
- host_dies: rank 1's host dies for good (cable pulled, then SIGKILL of its processes). The job
  resumes on the two hosts left within COMM_S + SLACK_S (rank 0 is free when its collective
  times out, as above) and SUCCEEDS with the uninterrupted run's final loss. A world-3 job submitted then waits in PENDING, and once the dead host's worker
  is forgotten (--lost-worker-retention) `fsdpctl status` says that it needs 3 workers and the
  fleet has 2.

usage: hosts_faults_test.py SOURCE_DIR BUILD_DIR SCENARIO
"""
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_hosts import Cluster, check, wait_until  # noqa: E402

HEARTBEAT_S = 6
COMM_S = 9
SLACK_S = 3
LONG_S = 15
SHORT_S = 3
COORDINATOR_CUT_S = 10  # > HEARTBEAT_S
COORDINATOR_STEPS = 8000  # trains past the cut and the workers' reconnection
CATCH_UP_S = 20  # the coordinator hears the workers again after a cut (TCP and gRPC backoff)
LOST_RETENTION_S = 10  # host_dies: the dead host's worker is forgotten after this
STEPS = 1500
EVERY = 100
TOLERANCE = 1e-6  # relative; the resumed trajectory is the same to fp32 rounding


def now_ms():
    return int(time.time() * 1000)


class Scenario:
    def __init__(self, cluster, coordinator_flags=(), steps=STEPS):
        self.cluster = cluster
        self.steps = steps
        root = os.path.join(cluster.dir, "shared-checkpoints")
        cluster.start_coordinator(*coordinator_flags)
        for host in range(3):
            cluster.start_worker(host, f"h{host}", root)
        cluster.wait_for_idle(3)
        self.reference = self.run_reference()

    def spec(self, name, world_size=2):
        return self.cluster.write_spec(name, world_size, self.steps, checkpoint_every=EVERY,
                                       max_restarts=2)

    def run_reference(self):
        job_id = self.cluster.submit(self.spec("reference"))
        done = self.cluster.wait_for_state(job_id, ("SUCCEEDED", "FAILED"), 240)
        check(done["state"] == "SUCCEEDED" and done["attempt"] == 1, f"reference: {done}")
        losses = self.cluster.losses(job_id)
        check(sorted(losses) == list(range(1, self.steps + 1)), "the reference lost step reports")
        self.cluster.wait_for_idle(3)
        return losses

    def workers(self):
        return self.cluster.ctl_json("workers")["workers"]

    def host_of_rank(self, job_id, rank):
        for worker in self.workers():
            if worker["job_id"] == job_id and worker["rank"] == rank and worker["state"] == "BUSY":
                return int(worker["hostname"].split("-")[1]), worker["id"]
        return None

    def start_victim(self, name, past_step):
        """Submits the job and returns it once it trained past `past_step` (a checkpoint is
        committed at every multiple of EVERY)."""
        job_id = self.cluster.submit(self.spec(name))
        wait_until(lambda: self.cluster.job(job_id)["step"] >= past_step, 120,
                   f"{job_id} to pass step {past_step}", period=0.05)
        return job_id

    def state_change(self, job, state, attempt=None):
        for change in job["transitions"]:
            if change["state"] == state and (attempt is None or change["attempt"] == attempt):
                return change
        return None

    def check_final_loss(self, done):
        expected = self.reference[self.steps]
        check(done["step"] == self.steps, f"ended at step {done['step']}")
        check(abs(done["loss"] - expected) <= TOLERANCE * abs(expected),
              f"final loss {done['loss']!r}, the uninterrupted run's {expected!r}")

    def check_steps_equal(self, losses, steps, what):
        for step in steps:
            a, b = self.reference[step], losses[step]
            check(abs(a - b) <= TOLERANCE * abs(a),
                  f"{what}: step {step}: {b!r}, the uninterrupted run's {a!r}")

    def resumed_step(self, job_id):
        logs = self.cluster.logs_of(job_id)
        found = re.search(r"resumed from the checkpoint of step (\d+)", logs)
        check(found is not None, f"{job_id} did not resume from a checkpoint:\n{logs[-3000:]}")
        return int(found.group(1))


def long_partition(scenario):
    cluster = scenario.cluster
    job_id = scenario.start_victim("victim", EVERY + 50)
    host, _ = wait_until(lambda: scenario.host_of_rank(job_id, 1), 10, "rank 1's host")
    _, rank0_worker = scenario.host_of_rank(job_id, 0)
    cut_at = now_ms()
    cluster.network.cut(cluster.host(host))
    cut_worker = scenario.host_of_rank(job_id, 1)[1]

    def idle(worker_id):
        return any(w["id"] == worker_id and w["state"] == "IDLE" for w in scenario.workers())

    time.sleep(max(0.0, LONG_S - (now_ms() - cut_at) / 1000))  # the partition's length
    cluster.network.mend(cluster.host(host))
    mended_at = now_ms()
    back = wait_until(lambda: now_ms() if idle(cut_worker) else None, COMM_S + SLACK_S + 10,
                      "the cut-off worker to be back")
    done = cluster.wait_for_state(job_id, ("SUCCEEDED", "FAILED"), 240)
    check(done["state"] == "SUCCEEDED", f"{job_id}: {done['state']}: {done['reason']}")
    retrying = scenario.state_change(done, "RETRYING", 1)
    check(retrying is not None, f"{job_id} was not retried: {done['transitions']}")
    ended_ms = retrying["unix_millis"] - cut_at
    bound_ms = (HEARTBEAT_S + SLACK_S) * 1000
    check(ended_ms <= bound_ms, f"the attempt ended {ended_ms} ms after the cut (bound {bound_ms})")
    # Attempt 2 needs rank 0's worker (two of the three workers are not cut off): its start
    # bounds the moment rank 0 was free.
    second = scenario.state_change(done, "SCHEDULED", 2)
    check(second is not None and rank0_worker in second["reason"],
          f"attempt 2 did not start on rank 0's worker and the idle host: {second}")
    free = second["unix_millis"]
    free_bound_ms = (COMM_S + SLACK_S) * 1000
    check(free - cut_at <= free_bound_ms,
          f"rank 0, blocked in a collective, was free {free - cut_at} ms after the cut "
          f"(bound {free_bound_ms})")
    check(free < mended_at, "attempt 2 did not start during the partition")
    check(back - mended_at <= free_bound_ms,
          f"the cut-off worker was back {back - mended_at} ms after the link returned")
    resumed = scenario.resumed_step(job_id)
    check(resumed >= EVERY, f"resumed from step {resumed}, expected a checkpoint >= {EVERY}")
    scenario.check_final_loss(done)
    losses = cluster.losses(job_id)
    scenario.check_steps_equal(losses, range(resumed + 1, STEPS + 1), "the resumed attempt")
    print(f"long partition ({LONG_S} s): attempt 1 ended {ended_ms} ms after the cut (bound "
          f"{bound_ms} ms); rank 0 free after {free - cut_at} ms (bound {free_bound_ms} ms); "
          f"attempt 2 started on it and the idle host, resumed from step {resumed}; the cut-off worker back {back - mended_at} ms after the link "
          f"returned; final loss {done['loss']} as uninterrupted")


def short_partition(scenario):
    cluster = scenario.cluster
    job_id = scenario.start_victim("victim", 200)
    host, _ = wait_until(lambda: scenario.host_of_rank(job_id, 1), 10, "rank 1's host")
    cluster.network.cut(cluster.host(host))
    time.sleep(SHORT_S)  # the partition's length
    cluster.network.mend(cluster.host(host))
    done = cluster.wait_for_state(job_id, ("SUCCEEDED", "FAILED"), 240)
    states = [change["state"] for change in done["transitions"]]
    check(done["state"] == "SUCCEEDED" and done["attempt"] == 1 and "RETRYING" not in states,
          f"{job_id}: {done['state']} attempt {done['attempt']}, states {states}")
    steps = [(e["step"], e["unix_millis"]) for e in cluster.events(job_id)
             if e.get("type") == "step"]
    numbers = [step for step, _ in steps]
    check(numbers == list(range(1, STEPS + 1)),
          f"steps reported out of order, lost or repeated: {len(numbers)} reports")
    gap = max(b - a for (_, a), (_, b) in zip(steps, steps[1:]))
    check(gap >= (SHORT_S - 1) * 1000, f"no stall seen: the longest gap between steps is {gap} ms")
    scenario.check_steps_equal(cluster.losses(job_id), range(1, STEPS + 1), "the stalled job")
    print(f"short partition ({SHORT_S} s): no retry; the longest stall between two steps "
          f"{gap} ms; every step reported once, losses as uninterrupted")


def coordinator_partition(scenario):
    cluster = scenario.cluster
    job_id = scenario.start_victim("victim", EVERY + 50)
    cluster.network.cut(cluster.network.coordinator)
    time.sleep(COORDINATOR_CUT_S)  # the partition's length
    step_at_mend = cluster.job(job_id)["step"]
    cluster.network.mend(cluster.network.coordinator)
    mended_at = now_ms()
    # The workers are heard again and the reports they buffered reach the store.
    wait_until(lambda: cluster.job(job_id)["step"] > step_at_mend, CATCH_UP_S,
               f"{job_id}'s reports to flow again after the link returned", period=0.1)
    heard_ms = now_ms() - mended_at
    done = cluster.wait_for_state(job_id, ("SUCCEEDED", "FAILED"), 240)
    states = [change["state"] for change in done["transitions"]]
    check(done["state"] == "SUCCEEDED" and done["attempt"] == 1 and "RETRYING" not in states,
          f"{job_id}: {done['state']} attempt {done['attempt']}, states {states}")
    check("lost-worker decisions suspended: 3 of 3 workers went silent" in
          cluster.log_text("coordinator.log"), "the coordinator did not log the mass silence")
    numbers = [e["step"] for e in cluster.events(job_id) if e.get("type") == "step"]
    check(numbers == list(range(1, scenario.steps + 1)),
          f"steps reported out of order, lost or repeated: {len(numbers)} reports")
    scenario.check_final_loss(done)
    scenario.check_steps_equal(cluster.losses(job_id), range(1, scenario.steps + 1),
                               "the job across the cut")
    print(f"coordinator cut off ({COORDINATOR_CUT_S} s): no retry; reports flowed again "
          f"{heard_ms} ms after the link returned (bound {CATCH_UP_S * 1000} ms); all "
          f"{len(numbers)} steps reported once and in order, with the uninterrupted run's losses")


def host_dies(scenario):
    cluster = scenario.cluster
    job_id = scenario.start_victim("victim", EVERY + 50)
    host, _ = wait_until(lambda: scenario.host_of_rank(job_id, 1), 10, "rank 1's host")
    killed_at = now_ms()
    cluster.kill_host(host)
    done = cluster.wait_for_state(job_id, ("SUCCEEDED", "FAILED"), 240)
    check(done["state"] == "SUCCEEDED", f"{job_id}: {done['state']}: {done['reason']}")
    scheduled = scenario.state_change(done, "SCHEDULED", 2)
    check(scheduled is not None, f"{job_id} did not start a second attempt")
    resumed_ms = scheduled["unix_millis"] - killed_at
    # Rank 0 waits in a collective for the dead rank until the collective timeout.
    bound_ms = (COMM_S + SLACK_S) * 1000
    check(resumed_ms <= bound_ms, f"attempt 2 started {resumed_ms} ms after the host died")
    dead = f"host-{host}"
    states = [w["state"] for w in scenario.workers() if w["hostname"] == dead]
    check(states in (["LOST"], []), f"the dead host's worker is {states}")
    scenario.check_final_loss(done)
    resumed = scenario.resumed_step(job_id)
    # Not enough workers left for a world-3 job once the dead host is forgotten
    # (--lost-worker-retention): it waits in PENDING, and says for what.
    waiting = cluster.submit(scenario.spec("too-big", world_size=3))
    wanted = "held: needs 3 cpu workers; the fleet has 2 registered"
    job = wait_until(lambda: (lambda j: j if wanted in j["reason"] else None)(
        cluster.job(waiting)), LOST_RETENTION_S + HEARTBEAT_S + 20,
                     f"{waiting} to say that it waits for a third worker")
    check(job["state"] == "PENDING" and job["attempt"] == 0, f"{waiting}: {job}")
    text = cluster.ctl("status", waiting).stdout
    check(wanted in text, f"fsdpctl status does not say what {waiting} waits for:\n{text}")
    print(f"host dies: attempt 2 started {resumed_ms} ms after the kill (bound {bound_ms} ms), "
          f"resumed from step {resumed}, SUCCEEDED as uninterrupted; a world-3 job waits: "
          f"{job['reason']!r}")


SCENARIOS = {f.__name__: f for f in (long_partition, short_partition, coordinator_partition,
                                     host_dies)}
# The coordinator's flags a scenario needs beyond the cluster's, and its job's length.
FLAGS = {"host_dies": ("--lost-worker-retention", f"{LOST_RETENTION_S}s")}
LENGTH = {"coordinator_partition": COORDINATOR_STEPS}


def main():
    build_dir, name = sys.argv[2], sys.argv[3]
    check(name in SCENARIOS, f"unknown scenario {name}; one of {sorted(SCENARIOS)}")
    with Cluster(build_dir, hosts=3, heartbeat_timeout_s=HEARTBEAT_S,
                 comm_timeout_s=COMM_S) as cluster:
        started = time.monotonic()
        SCENARIOS[name](Scenario(cluster, FLAGS.get(name, ()), LENGTH.get(name, STEPS)))
        print(f"{name}: passed in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
