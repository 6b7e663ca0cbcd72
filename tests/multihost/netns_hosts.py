"""Several hosts on one machine: each host a Linux network namespace, joined by a bridge.

Layout of one run (every name carries the run's id, mh<pid>, so that runs never collide and a
later run can sweep what a killed one left):
- mh<pid>-br holds the bridge br0, the "switch"; one veth port v<i> per namespace;
- mh<pid>-c holds the coordinator at 198.18.0.1 (e0), mh<pid>-h<i> host i at 198.18.0.<10+i>.
Addresses come from 198.18.0.0/15, the range set aside for network tests, and live only inside
namespaces this run made: nothing touches the machine's own network, and no host reaches
another over loopback (each namespace has its own).

A partition is a pulled cable: the host's port on the bridge goes down (the kernel here has no
netem, so latency and loss cannot be modelled; a link down drops every packet silently, as a
failed switch port does). The host itself keeps its address and sees only silence.

The cluster runs as docs/security.md tells an operator to: the coordinator serves TLS with a
certificate for its address, every RPC needs a token (one worker token per host, one admin token
for fsdpctl), workers give peers their host's address (--address).

Cleanup: Cluster.close() ends every process (each in a session of its own) and deletes every
namespace, and runs from `with`, atexit and SIGTERM; a run that was SIGKILLed is swept by the
next one (its namespaces' processes are killed and the namespaces deleted).

Outside CI a machine that cannot make namespaces (no root, no `ip`) skips with the reason; under
CI=true that is a failure.
"""
import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

COORDINATOR_IP = "198.18.0.1"
PORT = 7070
SKIP = 77  # the exit code ctest's SKIP_RETURN_CODE maps to "skipped"


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def wait_until(predicate, timeout, what, period=0.05):
    """Polls predicate() until it returns a true value (returned) or the deadline (failure)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(period)


def ip(*args, check_rc=True):
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check_rc and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def skip_or_fail(reason):
    """Outside CI: skip with the reason. Under CI=true: fail, so CI cannot pass by skipping."""
    if os.environ.get("CI", "").lower() == "true":
        print(f"FAILED: cannot run the multi-host tests under CI: {reason}")
        sys.exit(1)
    print(f"SKIPPED: {reason}")
    sys.exit(SKIP)


def require_namespaces():
    if shutil.which("ip") is None:
        skip_or_fail("no `ip` command (Debian iproute2)")
    if os.geteuid() != 0:
        skip_or_fail("network namespaces need root (run the tests as root, as CI does)")
    probe = f"mh{os.getpid()}-probe"
    made = ip("netns", "add", probe, check_rc=False)
    if made.returncode != 0:
        skip_or_fail(f"cannot make a network namespace: {made.stderr.strip()}")
    ip("netns", "del", probe, check_rc=False)


def sweep_stale_runs():
    """Deletes the namespaces (and kills the processes) of earlier runs whose test process is gone."""
    listed = ip("netns", "list", check_rc=False).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        match = re.fullmatch(r"mh(\d+)-\w+", name)
        if not match:
            continue
        owner = int(match.group(1))
        if owner != os.getpid() and os.path.exists(f"/proc/{owner}"):
            continue
        for pid in ip("netns", "pids", name, check_rc=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        ip("netns", "del", name, check_rc=False)


class Network:
    """The bridge namespace, the coordinator's namespace and `hosts` host namespaces."""

    def __init__(self, hosts):
        self.run_id = f"mh{os.getpid()}"
        self.bridge = f"{self.run_id}-br"
        self.namespaces = []
        self.hosts = [f"{self.run_id}-h{i}" for i in range(hosts)]
        self.coordinator = f"{self.run_id}-c"
        self.ports = {}  # namespace → its port on the bridge
        self.addresses = {self.coordinator: COORDINATOR_IP}
        for i, host in enumerate(self.hosts):
            self.addresses[host] = f"198.18.0.{10 + i}"
        self._add(self.bridge)
        ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
        ip("-n", self.bridge, "link", "set", "br0", "up")
        for index, name in enumerate([self.coordinator] + self.hosts):
            self._add(name)
            port = f"v{index}"
            ip("link", "add", "e0", "netns", name, "type", "veth", "peer", "name", port, "netns",
               self.bridge)
            ip("-n", self.bridge, "link", "set", port, "master", "br0", "up")
            ip("-n", name, "addr", "add", f"{self.addresses[name]}/24", "dev", "e0")
            ip("-n", name, "link", "set", "e0", "up")
            ip("-n", name, "link", "set", "lo", "up")
            self.ports[name] = port

    def _add(self, name):
        ip("netns", "add", name)
        self.namespaces.append(name)

    def cut(self, namespace):
        """Pulls the namespace's cable: its bridge port goes down, every packet is dropped."""
        ip("-n", self.bridge, "link", "set", self.ports[namespace], "down")

    def mend(self, namespace):
        ip("-n", self.bridge, "link", "set", self.ports[namespace], "up")

    def established(self, namespace):
        """The namespace's established TCP connections, as (local ip, peer ip, peer port)."""
        out = subprocess.run(["ip", "netns", "exec", namespace, "ss", "-tnH", "state",
                              "established"], capture_output=True, text=True, timeout=30).stdout
        connections = set()
        for line in out.splitlines():
            fields = line.split()
            if len(fields) < 4:
                continue
            local, peer = fields[-2], fields[-1]
            connections.add((local.rsplit(":", 1)[0], peer.rsplit(":", 1)[0],
                             int(peer.rsplit(":", 1)[1])))
        return connections

    def close(self):
        for name in reversed(self.namespaces):
            for pid in ip("netns", "pids", name, check_rc=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            ip("netns", "del", name, check_rc=False)
        self.namespaces = []


def make_certificates(directory):
    """A CA and the coordinator's certificate for its address (and localhost)."""
    with open(os.path.join(directory, "server.ext"), "w") as file:
        file.write(f"subjectAltName=DNS:localhost,IP:{COORDINATOR_IP}\n"
                   "extendedKeyUsage=serverAuth\n")
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"]
    d = directory
    commands = [
        ["openssl", "req", "-x509", *key, "-subj", "/CN=fsdpd-multihost-ca", "-addext",
         "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
         "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.pem"],
        ["openssl", "req", *key, "-subj", "/CN=fsdpd-coordinator", "-keyout", f"{d}/server.key",
         "-out", f"{d}/server.csr"],
        ["openssl", "x509", "-req", "-in", f"{d}/server.csr", "-CA", f"{d}/ca.pem", "-CAkey",
         f"{d}/ca.key", "-CAcreateserial", "-days", "2", "-extfile", f"{d}/server.ext", "-out",
         f"{d}/server.pem"],
    ]
    for command in commands:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        check(result.returncode == 0, f"{' '.join(command)}: {result.stderr}")


class Cluster:
    """A coordinator and workers on the network's hosts, with TLS and tokens."""

    def __init__(self, build_dir, hosts, heartbeat_timeout_s=6, comm_timeout_s=30,
                 keep_env=False):
        require_namespaces()
        sweep_stale_runs()
        self.build_dir = os.path.abspath(build_dir)
        self.dir = tempfile.mkdtemp(prefix="fsdpd-multihost-")
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.comm_timeout_s = comm_timeout_s
        self.processes = []  # (namespace, Popen)
        self.logs = []
        self.workers = {}  # name → (namespace, Popen)
        self.network = None
        self._closed = False
        atexit.register(self.close)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        # Ends the test (cleaning up) before ctest's TIMEOUT (600 s) would SIGKILL it.
        signal.signal(signal.SIGALRM, lambda *_: sys.exit("the test ran past its 540 s"))
        signal.alarm(540)
        self.network = Network(hosts)
        make_certificates(self.dir)
        self.tokens_file = os.path.join(self.dir, "tokens")
        lines = [self._token("admin", "admin", "ops")]
        for i in range(hosts):
            lines.append(self._token(f"host-{i}", "worker", f"host-{i}"))
        with open(self.tokens_file, "w") as file:
            file.write("\n".join(lines) + "\n")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("FSDPD_") and not k.startswith("XDG_")}
        self.env["HOME"] = self.dir
        self.env["FSDPD_COORDINATOR"] = f"{COORDINATOR_IP}:{PORT}"
        self.env["FSDPD_TLS_CA"] = os.path.join(self.dir, "ca.pem")
        self.env["FSDPD_TOKEN_FILE"] = os.path.join(self.dir, "admin.token")
        self.env["FSDPD_COMM_TIMEOUT_SECONDS"] = str(comm_timeout_s)

    def _token(self, file_name, role, name):
        token = os.urandom(24).hex()
        path = os.path.join(self.dir, f"{file_name}.token")
        with open(path, "w") as file:
            file.write(token + "\n")
        result = subprocess.run([self.binary("server/fsdpd"), "hash-token", "--role", role,
                                 "--name", name, "--token-file", path],
                                capture_output=True, text=True, timeout=30)
        check(result.returncode == 0, f"fsdpd hash-token: {result.stderr}")
        return result.stdout.strip()

    def binary(self, relative):
        path = os.path.join(self.build_dir, relative)
        check(os.access(path, os.X_OK), f"{path} is not built")
        return path

    def host(self, index):
        return self.network.hosts[index]

    def address(self, namespace):
        return self.network.addresses[namespace]

    def start(self, namespace, argv, log_name):
        log_path = os.path.join(self.dir, log_name)
        log = open(log_path, "w")
        process = subprocess.Popen(["ip", "netns", "exec", namespace, *argv], env=self.env,
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True, cwd=self.dir)
        log.close()
        self.processes.append((namespace, process))
        self.logs.append(log_path)
        return process

    def start_coordinator(self, *extra):
        self.coordinator = self.start(self.network.coordinator, [
            self.binary("server/fsdpd"), "--listen", f"{COORDINATOR_IP}:{PORT}", "--state-dir",
            os.path.join(self.dir, "state"), "--heartbeat-timeout",
            f"{self.heartbeat_timeout_s}s", "--tls-cert", os.path.join(self.dir, "server.pem"),
            "--tls-key", os.path.join(self.dir, "server.key"), "--tokens-file", self.tokens_file,
            *extra
        ], "coordinator.log")
        wait_until(lambda: self.ctl("--json", "list", timeout=10).returncode == 0, 30,
                   "the coordinator to serve")

    def start_worker(self, host_index, name, checkpoint_root):
        namespace = self.host(host_index)
        process = self.start(namespace, [
            self.binary("worker/fsdpd-worker"), "--device", "cpu", "--checkpoint-root",
            checkpoint_root, "--hostname", f"host-{host_index}", "--address",
            self.address(namespace), "--heartbeat-interval", "500ms", "--token-file",
            os.path.join(self.dir, f"host-{host_index}.token"), "--tls-ca",
            os.path.join(self.dir, "ca.pem")
        ], f"{name}.log")
        self.workers[name] = (namespace, process)
        return process

    def kill_host(self, host_index):
        """The host dies as a machine losing power does: its cable pulled for good first, so
        that no connection's close gets out, then SIGKILL of every process on it."""
        namespace = self.host(host_index)
        self.network.cut(namespace)
        for pid in ip("netns", "pids", namespace, check_rc=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass

    def ctl(self, *args, timeout=60):
        return subprocess.run(["ip", "netns", "exec", self.network.coordinator,
                               self.binary("client/fsdpctl"), *args], env=self.env,
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def ctl_json(self, *args, timeout=60):
        result = self.ctl("--json", *args, timeout=timeout)
        check(result.returncode == 0, f"fsdpctl --json {' '.join(args)}: {result.stderr}")
        return json.loads(result.stdout)

    def workers_in(self, state):
        result = self.ctl("--json", "workers", timeout=10)
        if result.returncode != 0:
            return []
        return [w for w in json.loads(result.stdout)["workers"] if w["state"] == state]

    def wait_for_idle(self, count, timeout=60):
        wait_until(lambda: len(self.workers_in("IDLE")) >= count, timeout,
                   f"{count} idle workers")

    def write_spec(self, name, world_size, steps, checkpoint_every=0, max_restarts=0, seed=3):
        path = os.path.join(self.dir, f"{name}.yaml")
        with open(path, "w") as file:
            file.write(f"""name: {name}
model: {{vocab: 64, dim: 32, layers: 1, heads: 2, ffn_mult: 2}}
data: {{source: synthetic, seq_len: 16}}
train: {{batch_size: 2, steps: {steps}, lr: 1.0e-3, seed: {seed}}}
parallel: {{world_size: {world_size}, device: cpu, param_dtype: fp32, reduce_dtype: fp32}}
checkpoint: {{every_steps: {checkpoint_every}, keep: 2}}
profile: {{steps: 0}}
max_restarts: {max_restarts}
""")
        return path

    def submit(self, spec_path):
        result = self.ctl("submit", spec_path, timeout=60)
        check(result.returncode == 0, f"submit {spec_path}: {result.stdout}{result.stderr}")
        return re.search(r"\bjob-\d+\b", result.stdout).group(0)

    def job(self, job_id):
        return self.ctl_json("status", job_id)

    def wait_for_state(self, job_id, states, timeout):
        states = (states,) if isinstance(states, str) else states
        return wait_until(lambda: (lambda job: job if job["state"] in states else None)(
            self.job(job_id)), timeout, f"{job_id} to reach {states}", period=0.1)

    def events(self, job_id):
        """The job's events, as `fsdpctl --json watch` prints them once it has ended."""
        result = self.ctl("--json", "watch", job_id, timeout=60)
        return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]

    def losses(self, job_id):
        """step → loss of the job's step reports (the last attempt's, where steps repeat)."""
        return {event["step"]: event["loss"] for event in self.events(job_id)
                if event.get("type") == "step"}

    def logs_of(self, job_id):
        result = self.ctl("logs", job_id, timeout=60)
        check(result.returncode == 0, f"logs {job_id}: {result.stderr}")
        return result.stdout

    def log_text(self, name):
        with open(os.path.join(self.dir, name), errors="replace") as file:
            return file.read()

    def dump_logs(self):
        for path in self.logs:
            try:
                with open(path, errors="replace") as file:
                    lines = file.read().splitlines()
            except OSError:
                continue
            print(f"---- {os.path.basename(path)} (last lines)")
            print("\n".join(lines[-25:]))

    def close(self):
        if self._closed:
            return
        self._closed = True
        for _, process in reversed(self.processes):
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        for _, process in self.processes:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.poll()
        if self.network is not None:
            self.network.close()
        if os.environ.get("FSDPD_KEEP_MULTIHOST"):
            print(f"kept {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, kind, value, trace):
        if kind is not None:
            self.dump_logs()
        self.close()
        return False


def gloo_peers(network, namespaces, coordinator_port=PORT):
    """For each namespace, the peer addresses of its established connections other than to the
    coordinator: the Gloo mesh of the ranks running there."""
    peers = {}
    for namespace in namespaces:
        peers[namespace] = {(local, peer) for local, peer, port in network.established(namespace)
                            if port != coordinator_port and peer != COORDINATOR_IP}
    return peers
