"""Jobs across hosts, in production configuration (TLS, tokens), on network namespaces.

- world 4 over 4 hosts, one worker each; world 8 over 4 hosts, two workers each;
- each job's loss trajectory equals the same job's on one host at the same world size, step by
  step. Tolerance: a relative 1e-6, fp32 rounding. The ranks, their data and their reduction
  order (Gloo's ring, ordered by rank) are the same on one host and on four, and the transport
  carries bytes, not arithmetic, so the trajectories are expected to be equal to the bit; the
  test prints the largest difference it saw;
- the ranks reach each other on their hosts' addresses: while the job runs, every host holds
  established Gloo connections to each other host's address (--address), none on loopback.

usage: hosts_training_test.py SOURCE_DIR BUILD_DIR
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_hosts import Cluster, check, gloo_peers  # noqa: E402

STEPS = 120
TOLERANCE = 1e-6


def run_job(cluster, name, world_size, watch_hosts=None):
    """Runs the job to SUCCEEDED; returns (losses by step, Gloo peers seen per host)."""
    job_id = cluster.submit(cluster.write_spec(name, world_size, STEPS))
    seen = {}
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            for namespace, peers in gloo_peers(cluster.network, watch_hosts).items():
                seen.setdefault(namespace, set()).update(peers)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch) if watch_hosts else None
    if watcher:
        watcher.start()
    try:
        done = cluster.wait_for_state(job_id, ("SUCCEEDED", "FAILED", "CANCELLED"), 180)
    finally:
        stop.set()
        if watcher:
            watcher.join()
    check(done["state"] == "SUCCEEDED" and done["attempt"] == 1,
          f"{name}: {done['state']} after {done['attempt']} attempts: {done['reason']}")
    losses = cluster.losses(job_id)
    check(sorted(losses) == list(range(1, STEPS + 1)),
          f"{name}: step reports {sorted(losses)[:5]}..., expected 1..{STEPS}")
    return losses, seen


def stop_workers(cluster, names):
    for name in names:
        _, process = cluster.workers.pop(name)
        process.terminate()
        process.wait(timeout=30)


def compare(reference, across, what):
    worst = 0.0
    for step in range(1, STEPS + 1):
        a, b = reference[step], across[step]
        difference = abs(a - b) / max(abs(a), 1e-30)
        worst = max(worst, difference)
        check(difference <= TOLERANCE,
              f"{what}: step {step}: one host {a!r}, across hosts {b!r} (relative {difference})")
    print(f"{what}: {STEPS} steps equal within {TOLERANCE} (largest relative difference {worst})")


def check_mesh(cluster, seen, per_host):
    hosts = cluster.network.hosts
    for namespace in hosts:
        mine = cluster.address(namespace)
        pairs = seen.get(namespace, set())
        check(all(local == mine for local, _ in pairs),
              f"{namespace}: Gloo connections from {sorted(pairs)}, expected from {mine} only")
        peers = {peer for _, peer in pairs}
        others = {cluster.address(other) for other in hosts if other != namespace}
        check(others <= peers,
              f"{namespace} ({mine}) reached {sorted(peers)}, expected every other host "
              f"{sorted(others)}")
        check(not any(peer.startswith("127.") for peer in peers),
              f"{namespace}: a Gloo connection over loopback: {sorted(peers)}")
        if per_host > 1:
            check(mine in peers, f"{namespace}: its two ranks did not connect on {mine}")
    print(f"Gloo: every host connected to every other on the hosts' addresses: "
          f"{ {cluster.address(n): sorted({p for _, p in seen[n]}) for n in hosts} }")


def world(cluster, world_size, per_host, root):
    # The reference: the whole world on host 0.
    names = [f"ref{world_size}-{i}" for i in range(world_size)]
    for name in names:
        cluster.start_worker(0, name, root)
    cluster.wait_for_idle(world_size)
    reference, _ = run_job(cluster, f"one-host-{world_size}", world_size)
    stop_workers(cluster, names)
    # The same job over four hosts.
    names = []
    for host in range(4):
        for slot in range(per_host):
            name = f"w{world_size}-h{host}-{slot}"
            cluster.start_worker(host, name, root)
            names.append(name)
    cluster.wait_for_idle(world_size)
    across, seen = run_job(cluster, f"four-hosts-{world_size}", world_size,
                           watch_hosts=cluster.network.hosts)
    stop_workers(cluster, names)
    compare(reference, across, f"world {world_size} over 4 hosts ({per_host} a host)")
    check_mesh(cluster, seen, per_host)


def main():
    build_dir = sys.argv[2]
    with Cluster(build_dir, hosts=4) as cluster:
        root = os.path.join(cluster.dir, "shared-checkpoints")
        cluster.start_coordinator()
        started = time.monotonic()
        world(cluster, 4, 1, root)
        world(cluster, 8, 2, root)
        print(f"hosts_training: passed in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
