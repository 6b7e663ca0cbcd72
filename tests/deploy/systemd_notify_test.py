#!/usr/bin/env python3
"""Checks the contract fsdpd.service relies on: with Type=notify and WatchdogSec=, fsdpd must
send READY=1 once it serves, then WATCHDOG=1 at least every WatchdogSec/2, and stop cleanly on
SIGTERM. Plays systemd's part: a notification socket in NOTIFY_SOCKET and WATCHDOG_USEC.

  systemd_notify_test.py FSDPD_BINARY
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

WATCHDOG_SECONDS = 2.0
READY_TIMEOUT_SECONDS = 60.0


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def receive_until(sock, wanted, deadline, messages):
    """Collects notification messages until one holds the line `wanted` or the deadline."""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = sock.recv(4096).decode(errors="replace")
        except socket.timeout:
            break
        lines = data.split("\n")
        messages.append((time.monotonic(), lines))
        if wanted in lines:
            return True
    return False


def main(binary):
    failures = []
    with tempfile.TemporaryDirectory() as directory:
        socket_path = os.path.join(directory, "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(socket_path)
        environment = dict(os.environ, NOTIFY_SOCKET=socket_path,
                           WATCHDOG_USEC=str(int(WATCHDOG_SECONDS * 1e6)))
        environment.pop("WATCHDOG_PID", None)
        log_path = os.path.join(directory, "fsdpd.log")
        with open(log_path, "w") as log:
            process = subprocess.Popen(
                [binary, "--listen", f"127.0.0.1:{free_port()}", "--metrics-listen",
                 f"127.0.0.1:{free_port()}", "--state-dir", os.path.join(directory, "state")],
                env=environment, stdout=log, stderr=subprocess.STDOUT)
        messages = []
        try:
            if not receive_until(sock, "READY=1", time.monotonic() + READY_TIMEOUT_SECONDS,
                                 messages):
                failures.append(f"no READY=1 within {READY_TIMEOUT_SECONDS:.0f}s "
                                f"(received {[m[1] for m in messages]})")
            else:
                # Three watchdog periods: systemd would kill a daemon silent for one.
                window_end = time.monotonic() + 3 * WATCHDOG_SECONDS
                pings = []
                while time.monotonic() < window_end:
                    before = len(messages)
                    if receive_until(sock, "WATCHDOG=1", window_end, messages):
                        pings.append(messages[-1][0])
                    elif len(messages) == before:
                        break
                gaps = [later - earlier for earlier, later in zip(pings, pings[1:])]
                if len(pings) < 3:
                    failures.append(f"{len(pings)} WATCHDOG=1 in {3 * WATCHDOG_SECONDS:.0f}s "
                                    f"with WatchdogSec={WATCHDOG_SECONDS:.0f}s")
                elif max(gaps) > WATCHDOG_SECONDS:
                    failures.append(f"watchdog pings {max(gaps):.2f}s apart, over WatchdogSec")
            if process.poll() is not None:
                failures.append(f"fsdpd exited early with {process.returncode}")
            else:
                process.send_signal(signal.SIGTERM)
                try:
                    status = process.wait(timeout=30)
                    if status != 0:
                        failures.append(f"fsdpd exited with {status} on SIGTERM")
                except subprocess.TimeoutExpired:
                    failures.append("fsdpd did not stop within 30s of SIGTERM")
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            sock.close()
        if failures:
            with open(log_path) as log:
                sys.stderr.write("---- fsdpd output ----\n" + log.read()[-4000:])
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    if not failures:
        print("fsdpd: READY=1, watchdog pings and a clean stop, as fsdpd.service expects")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
