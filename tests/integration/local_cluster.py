"""Real fsdpd, fsdpd-worker and fsdpctl processes on loopback for the Python integration tests.

Every process a test starts runs in a session of its own, so that the background children of a
shell line are found again and ended with it. Nothing outside the test's temporary folder is
read or written: HOME, TMPDIR and the XDG folders point into it, and no token or CA of the real
environment reaches fsdpctl or the workers.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def wait_until(predicate, timeout, what):
    """Polls predicate() until it returns a true value (returned) or the deadline (failure)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


class Sandbox:
    """A temporary folder, an environment confined to it, and the processes started in it."""

    def __init__(self, build_dir, prefix):
        self.build_dir = os.path.abspath(build_dir)
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.home = os.path.join(self.dir, "home")
        os.makedirs(self.home)
        os.makedirs(os.path.join(self.dir, "tmp"))
        env = dict(os.environ)
        for name in ("XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "FSDPD_TOKEN_FILE",
                     "FSDPD_TLS_CA", "FSDPD_STATE_DIR", "FSDPD_WORKER_TOKEN_FILE",
                     "FSDPD_TLS_CERT", "FSDPD_TLS_KEY"):
            env.pop(name, None)
        env["HOME"] = self.home
        env["TMPDIR"] = os.path.join(self.dir, "tmp")
        # The built programs come first, under the names README uses.
        env["PATH"] = os.pathsep.join(
            [os.path.join(self.build_dir, sub) for sub in ("server", "worker", "client")] +
            [env.get("PATH", "")])
        self.env = env
        self.started = []  # one Popen per session; its pid is the session's process group
        self.logs = []

    def use_ports(self):
        """Points fsdpd, the workers and fsdpctl at free loopback ports via their environment."""
        self.address = f"127.0.0.1:{free_port()}"
        self.metrics_address = f"127.0.0.1:{free_port()}"
        self.env["FSDPD_LISTEN"] = self.address
        self.env["FSDPD_METRICS_LISTEN"] = self.metrics_address
        self.env["FSDPD_COORDINATOR"] = self.address

    def binary(self, name):
        path = shutil.which(name, path=self.env["PATH"])
        check(path is not None and path.startswith(self.build_dir),
              f"{name} resolves to {path}, not to the build in {self.build_dir}")
        return path

    def start(self, argv_or_line, log_name, cwd=None):
        """Starts a command (a list, or a shell line run by bash) in a new session; its output
        goes to a log file. Returns the Popen."""
        log_path = os.path.join(self.dir, log_name)
        log = open(log_path, "w")
        argv = ["bash", "-c", argv_or_line] if isinstance(argv_or_line, str) else argv_or_line
        process = subprocess.Popen(argv, cwd=cwd or self.dir, env=self.env, stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
        log.close()
        self.started.append(process)
        self.logs.append(log_path)
        return process

    def run(self, argv_or_line, timeout=60, cwd=None):
        """Runs a command to its end; returns CompletedProcess with stdout and stderr text."""
        argv = ["bash", "-c", argv_or_line] if isinstance(argv_or_line, str) else argv_or_line
        return subprocess.run(argv, cwd=cwd or self.dir, env=self.env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def ctl(self, *args, timeout=60):
        return self.run([self.binary("fsdpctl"), *args], timeout=timeout)

    def ctl_json(self, *args, timeout=60):
        result = self.ctl("--json", *args, timeout=timeout)
        check(result.returncode == 0, f"fsdpctl --json {' '.join(args)}: {result.stderr}")
        return json.loads(result.stdout)

    def idle_workers(self):
        result = self.ctl("--json", "workers", timeout=10)
        if result.returncode != 0:
            return 0
        return sum(w["state"] == "IDLE" for w in json.loads(result.stdout)["workers"])

    def serving(self):
        return self.ctl("--json", "list", timeout=10).returncode == 0

    def start_cpu_cluster(self, workers):
        """fsdpd on a state folder of the sandbox, then `workers` CPU workers confined to the
        sandbox, waited for until all are idle."""
        self.start([self.binary("fsdpd"), "--state-dir", os.path.join(self.dir, "state")],
                   "fsdpd.log")
        wait_until(self.serving, 30, "the coordinator")
        for rank in range(workers):
            self.start([self.binary("fsdpd-worker"), "--device", "cpu", "--checkpoint-root",
                        os.path.join(self.dir, "checkpoints"), "--allowed-root", self.dir],
                       f"worker{rank}.log")
        wait_until(lambda: self.idle_workers() >= workers, 60, f"{workers} idle workers")

    def log_text(self, log_name):
        with open(os.path.join(self.dir, log_name), errors="replace") as file:
            return file.read()

    def dump_logs(self):
        for path in self.logs:
            with open(path, errors="replace") as file:
                lines = file.read().splitlines()
            print(f"---- {os.path.basename(path)} (last lines)")
            print("\n".join(lines[-30:]))

    def finish(self, ok):
        """A test's last word: on failure its processes' logs, then close, keeping the folder
        only for a failed test under FSDPD_TEST_KEEP=1."""
        if not ok:
            self.dump_logs()
        self.close(keep=not ok and os.environ.get("FSDPD_TEST_KEEP") == "1")

    def close(self, keep=False):
        # Workers before the coordinator, so that they can still report; then anything left.
        for process in reversed(self.started):
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        for process in self.started:
            while time.monotonic() < deadline:
                process.poll()  # reaps the session's leader, which would keep the group alive
                try:
                    os.killpg(process.pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.poll()
        if keep:
            print(f"kept {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def generate_stubs(source_dir, out_dir):
    """Generates the fsdpd.v1 Python messages and stubs from proto/ into out_dir and puts it on
    sys.path; `from fsdpd.v1 import jobs_pb2, jobs_pb2_grpc` works afterwards."""
    import glob
    import sys

    import grpc_tools
    from grpc_tools import protoc

    proto_dir = os.path.join(source_dir, "proto")
    protos = sorted(glob.glob(os.path.join(proto_dir, "fsdpd", "v1", "*.proto")))
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    os.makedirs(out_dir, exist_ok=True)
    args = ["protoc", f"-I{proto_dir}", f"-I{well_known}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}"] + protos
    check(protoc.main(args) == 0, "protoc failed on proto/fsdpd/v1")
    for package in ("fsdpd", os.path.join("fsdpd", "v1")):
        open(os.path.join(out_dir, package, "__init__.py"), "a").close()
    sys.path.insert(0, out_dir)
