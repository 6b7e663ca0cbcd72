"""fsdpctl on a real terminal, through the real programs on loopback.

- `fsdpctl watch` in tmux panes 120, 80 and 60 columns wide, all following one job: every line
  of the pane (wrapped rows joined) fits the width, at most one progress line is on the screen
  at any moment (redraws replace it, none wrap into a scrolling log), no line is a stray
  fragment (a long state line goes on in indented lines), and the progress line has its bar,
  percentage, ETA and loss, and at 80 and 120 columns the loss sparkline with its range.
- `fsdpctl logs JOB -f` across two coordinator restarts (SIGTERM, then SIGKILL) mid-stream:
  it reconnects, says so, and ends when the job ends having printed every line of the job's
  log exactly once; with --tail 2, the two lines it started from and everything after them.

usage: terminal_test.py SOURCE_DIR BUILD_DIR
"""
import collections
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

from local_cluster import Sandbox, check, wait_until

WIDTHS = (120, 80, 60)
STATE_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  [A-Z]+")
FINAL_LINE = re.compile(r"^job job-\d+ [A-Z]+")
BAR = re.compile(r"\|[█▏▎▍▌▋▊▉ ]+\|\s+\d+%")
# A whole progress line, field by field (client/progress_line.h): anything left of an earlier,
# longer line breaks it.
NUMBER = r"-?[\d.]+(e[+-]\d+)?"
PROGRESS_LINE = re.compile(
    rf"step \d+/\d+ \|[█▏▎▍▌▋▊▉ ]+\| +\d+%(  {NUMBER} (steps/s|s/step))?"
    rf"(  ETA (\d+h\d\dm|\d+m\d\ds|\d+s|-)(  loss (-?\d+\.\d{{4}}|-?nan|-?inf)"
    rf"( [▁▂▃▄▅▆▇█ ]+ {NUMBER}–{NUMBER})?(  [\d.]+[kM]? tok/s)?)?)?")
SPARKLINE_RANGE = re.compile(r"loss \S+ [▁▂▃▄▅▆▇█ ]+ -?[\d.e+-]+–-?[\d.e+-]+")


def write_spec(sandbox, name, steps, dim):
    path = os.path.join(sandbox.dir, f"{name}.yaml")
    with open(path, "w") as file:
        file.write(f"""name: {name}
model: {{vocab: 64, dim: {dim}, layers: 1, heads: 2, ffn_mult: 2}}
data: {{source: synthetic, seq_len: 32}}
train: {{batch_size: 4, steps: {steps}, lr: 1.0e-3, seed: 1}}
parallel: {{world_size: 2, device: cpu, param_dtype: fp32, reduce_dtype: fp32}}
checkpoint: {{every_steps: 0}}
profile: {{steps: 0}}
max_restarts: 0
""")
    return path


def submit(sandbox, spec):
    return sandbox.ctl_json("submit", spec)["id"]


def job_state(sandbox, job):
    result = sandbox.ctl("--json", "status", job, timeout=10)
    if result.returncode != 0:
        return None
    return json.loads(result.stdout)["state"]


class Tmux:
    """A tmux server of the test's own (its socket in the sandbox)."""

    def __init__(self, sandbox):
        self.sandbox = sandbox
        self.socket = os.path.join(sandbox.dir, "tmux.sock")
        self.conf = os.path.join(sandbox.dir, "tmux.conf")
        with open(self.conf, "w") as file:
            file.write("set -g history-limit 10000\n")

    def tmux(self, *args):
        result = subprocess.run(["tmux", "-u", "-S", self.socket, "-f", self.conf, *args],
                                env=self.sandbox.env, capture_output=True, text=True, timeout=30)
        check(result.returncode == 0, f"tmux {' '.join(args)}: {result.stderr}")
        return result.stdout

    def start(self, name, width, argv):
        """Runs argv in a new session's pane; the pane's shell then prints its exit status as
        "[exit N]" and keeps the pane (and its terminal) open."""
        line = " ".join(shlex.quote(arg) for arg in argv)
        self.tmux("new-session", "-d", "-s", name, "-x", str(width), "-y", "24",
                  line + '; echo "[exit $?]"; exec cat')

    def screen(self, name):
        """The pane's lines, history included, each wrapped line joined back into one."""
        text = self.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", name)
        return [line.rstrip() for line in text.splitlines()]

    def exit_status(self, name):
        """None while the pane's command runs, then its exit status."""
        for line in self.screen(name):
            found = re.fullmatch(r"\[exit (\d+)\]", line)
            if found:
                return int(found.group(1))
        return None

    def close(self):
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], env=self.sandbox.env,
                       capture_output=True, timeout=30)


def screen_faults(lines, width):
    """What is wrong with a watch pane's lines."""
    faults = []
    progress = [line for line in lines if line.startswith("step ")]
    if len(progress) > 1:
        faults.append(f"{len(progress)} progress lines on the screen: {progress[:3]}")
    for line in progress:
        if not PROGRESS_LINE.fullmatch(line):
            faults.append(f"a progress line with stray characters: {line!r}")
    continues = False  # whether the line before may go on in an indented line
    for line in lines:
        if len(line) > width:
            faults.append(f"a line of {len(line)} columns: {line!r}")
        if line.startswith(" ") and continues:
            continue
        continues = bool(STATE_LINE.match(line) or FINAL_LINE.match(line))
        if line and not (continues or line.startswith("step ") or
                         re.fullmatch(r"\[exit \d+\]", line) or line.startswith("fsdpctl: ")):
            faults.append(f"a stray fragment: {line!r}")
    return faults


def check_watch_widths(sandbox, tmux):
    job = submit(sandbox, write_spec(sandbox, "watched", 1500, 32))
    for width in WIDTHS:
        tmux.start(f"w{width}", width, [sandbox.binary("fsdpctl"), "watch", job])
    drawn = {width: set() for width in WIDTHS}  # the distinct progress lines seen
    faults = {width: [] for width in WIDTHS}

    def look():
        done = True
        for width in WIDTHS:
            lines = tmux.screen(f"w{width}")
            for fault in screen_faults(lines, width):
                if fault not in faults[width]:
                    faults[width].append(fault)
            drawn[width].update(line for line in lines if line.startswith("step "))
            done = done and tmux.exit_status(f"w{width}") is not None
        return done

    wait_until(look, 300, "the watchers to finish")
    for width in WIDTHS:
        lines = tmux.screen(f"w{width}")
        print(f"---- watch at {width} columns, last screen:")
        print("\n".join(line for line in lines if line))
        status = tmux.exit_status(f"w{width}")
        check(status == 0, f"watch at {width} columns exited {status}")
        check(not faults[width], f"at {width} columns: {faults[width][:5]}")
        check(len(drawn[width]) >= 3,
              f"at {width} columns only {len(drawn[width])} progress line(s) were ever drawn")
        final = [line for line in lines if line.startswith("step ")]
        check(len(final) == 1 and BAR.search(final[0]) and "100%" in final[0],
              f"at {width} columns the last progress line has no full bar: {final}")
        check(any(FINAL_LINE.match(line) and "SUCCEEDED" in line for line in lines),
              f"at {width} columns no closing line")
        with_range = [line for line in drawn[width] if SPARKLINE_RANGE.search(line)]
        if width >= 80:
            check(with_range, f"at {width} columns no sparkline with its range: "
                  f"{sorted(drawn[width])[-3:]}")
        for line in drawn[width]:
            check(BAR.search(line) and "ETA" in line and "loss" in line,
                  f"at {width} columns a progress line lacks its bar, ETA or loss: {line!r}")
    print("watch: fits 120, 80 and 60 columns; one progress line; bar, ETA, loss range")


def restart_coordinator(sandbox, coordinator, how):
    """Stops the coordinator with `how` and starts a new one on the same state folder."""
    coordinator.send_signal(how)
    coordinator.wait(timeout=60)
    again = sandbox.start([sandbox.binary("fsdpd"), "--state-dir",
                           os.path.join(sandbox.dir, "state")], f"fsdpd-{len(sandbox.logs)}.log")
    wait_until(sandbox.serving, 60, "the restarted coordinator")
    return again


def read_lines(path):
    with open(path, errors="replace") as file:
        return [line for line in file.read().splitlines() if line]


def follow_logs(sandbox, job, name, *extra):
    out = os.path.join(sandbox.dir, f"{name}.out")
    err = os.path.join(sandbox.dir, f"{name}.err")
    with open(out, "w") as stdout, open(err, "w") as stderr:
        process = subprocess.Popen(
            [sandbox.binary("fsdpctl"), "logs", job, "-f", "--reconnect-for", "120", *extra],
            env=sandbox.env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
            start_new_session=True)
    sandbox.started.append(process)
    return process, out, err


def check_logs_follow_restarts(sandbox, coordinator, workers):
    # Long enough (about 25 s of training here, more under load) that the job cannot end
    # between the two restarts, whatever the polling below costs; it ran 3000 steps and once
    # finished before the second restart on a loaded machine.
    job = submit(sandbox, write_spec(sandbox, "followed", 20000, 32))
    everything, all_out, all_err = follow_logs(sandbox, job, "follow-all")

    def restart(how):
        # The workers wait (SIGSTOP) while the coordinator restarts, so that the job cannot end
        # before both restarts, however fast this machine trains.
        for worker in workers:
            worker.send_signal(signal.SIGSTOP)
        try:
            return restart_coordinator(sandbox, coordinator, how)
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGCONT)

    # Mid-stream: lines printed already, more to come; the tail is of more than two lines.
    wait_until(lambda: len(read_lines(all_out)) >= 6, 180, "the first log lines")
    tailed, tail_out, tail_err = follow_logs(sandbox, job, "follow-tail", "--tail", "2")
    wait_until(lambda: len(read_lines(tail_out)) >= 2, 60, "the tail")
    def reconnected(times):
        # New lines alone do not show that logs -f reached the new coordinator: lines already
        # sent before the SIGTERM can arrive after it. A second restart while logs -f still
        # waits out its backoff from the first goes unseen (one loss, one reconnection).
        return lambda: open(all_err).read().count("reconnected to") >= times

    before = len(read_lines(all_out))
    coordinator = restart(signal.SIGTERM)
    wait_until(reconnected(1), 180, "logs -f to reconnect after the first restart")
    wait_until(lambda: len(read_lines(all_out)) >= before + 4, 180,
               "log lines after the first restart")
    before = len(read_lines(all_out))
    coordinator = restart(signal.SIGKILL)
    wait_until(reconnected(2), 180, "logs -f to reconnect after the second restart")
    wait_until(lambda: len(read_lines(all_out)) >= before + 4, 180,
               "log lines after the second restart")
    for process, name in ((everything, "logs -f"), (tailed, "logs -f --tail 2")):
        process.wait(timeout=600)
        check(process.returncode == 0, f"{name} exited {process.returncode}: "
              f"{open(all_err if process is everything else tail_err).read()}")
    check(job_state(sandbox, job) == "SUCCEEDED", f"the job is {job_state(sandbox, job)}")
    full = sandbox.ctl("logs", job).stdout.splitlines()
    full = [line for line in full if line]
    followed = read_lines(all_out)
    stderr = open(all_err).read()
    print(f"logs -f: {len(followed)} lines followed, {len(full)} stored; stderr:\n{stderr}")
    check(stderr.count("lost the coordinator") == 2 and stderr.count("reconnected to") == 2,
          f"logs -f did not say twice that it lost and found the coordinator: {stderr!r}")
    repeated = [line for line, count in collections.Counter(followed).items()
                if count > collections.Counter(full)[line]]
    missing = [line for line, count in collections.Counter(full).items()
               if count > collections.Counter(followed)[line]]
    check(not repeated and not missing,
          f"logs -f repeated {repeated[:3]} and lost {missing[:3]} ({len(followed)} lines, "
          f"{len(full)} stored)")
    tail = read_lines(tail_out)
    check(tail and tail[0] in full, f"logs -f --tail 2 printed {tail[:3]}")
    expected = full[full.index(tail[0]):]
    check(collections.Counter(tail) == collections.Counter(expected),
          f"logs -f --tail 2: {len(tail)} lines, expected the {len(expected)} from its first; "
          f"extra {list((collections.Counter(tail) - collections.Counter(expected)))[:3]}, "
          f"missing {list((collections.Counter(expected) - collections.Counter(tail)))[:3]}")
    check(len(tail) < len(full), "logs -f --tail 2 printed the whole log")
    print("logs -f: rode out a SIGTERM and a SIGKILL restart; every line once, --tail kept")
    return coordinator


def main(source_dir, build_dir):
    sandbox = Sandbox(build_dir, "fsdpd-terminal-")
    sandbox.use_ports()
    sandbox.env["LANG"] = sandbox.env["LC_ALL"] = "C.UTF-8"
    tmux = Tmux(sandbox)
    ok = False
    try:
        coordinator = sandbox.start(
            [sandbox.binary("fsdpd"), "--state-dir", os.path.join(sandbox.dir, "state")],
            "fsdpd.log")
        wait_until(sandbox.serving, 30, "the coordinator")
        workers = [sandbox.start([sandbox.binary("fsdpd-worker"), "--device", "cpu",
                                  "--hostname", f"terminal-{rank}"], f"worker{rank}.log")
                   for rank in range(2)]
        wait_until(lambda: sandbox.idle_workers() >= 2, 60, "two idle workers")
        failures = []
        for name, run in [("watch widths", lambda: check_watch_widths(sandbox, tmux)),
                          ("logs -f restarts",
                           lambda: check_logs_follow_restarts(sandbox, coordinator, workers))]:
            try:
                run()
            except AssertionError as error:
                print(f"FAILED {name}: {error}")
                failures.append(name)
        check(not failures, f"failed: {', '.join(failures)}")
        ok = True
    finally:
        tmux.close()
        sandbox.finish(ok)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
