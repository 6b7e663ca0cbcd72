"""README's "A tour of a job", run as README writes it.

The commands are read from the first fenced block under README.md's heading "## A tour of a job"
and each line runs, unchanged, in bash, from a folder laid out as the repository's root (a copy
of examples/), with the built fsdpd, fsdpd-worker and fsdpctl first on PATH. Only the environment
differs from a person's shell: HOME and TMPDIR point into a temporary folder, and FSDPD_LISTEN,
FSDPD_METRICS_LISTEN and FSDPD_COORDINATOR name free loopback ports (the programs' documented
environment), so that the test neither touches the real home nor collides with other tests.

Between lines the harness waits as a person would: after a line that starts the coordinator,
until it answers; after one that starts workers, until they are idle. Every foreground command
must succeed, and what it prints must agree with the tour: the ids the later lines use are the
ones submit printed, a watched job SUCCEEDED, the export is a safetensors file, a cancelled job
is CANCELLED. First, README's configuration table, `fsdpd --help` and fsdpd itself must agree on
the default --state-dir.

usage: readme_tour_test.py SOURCE_DIR BUILD_DIR
"""
import json
import os
import re
import shlex
import shutil
import struct
import sys

from local_cluster import Sandbox, check, wait_until

HEADING = "## A tour of a job"


def tour_lines(readme):
    """The lines of the first fenced code block after HEADING."""
    lines = readme.splitlines()
    check(HEADING in lines, f"README.md has no line {HEADING!r}")
    start = lines.index(HEADING) + 1
    opening = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    check(all(not line.startswith("## ") for line in lines[start:opening]),
          f"no code block under {HEADING!r} before the next section")
    closing = next(i for i in range(opening + 1, len(lines)) if lines[i].startswith("```"))
    return lines[opening + 1:closing]


def programs(tokens):
    """The commands of one shell line's tokens, split at `&`, `&&` and `;`."""
    commands, current = [], []
    for token in tokens:
        if token in ("&", "&&", ";"):
            commands.append(current)
            current = []
        else:
            current.append(token)
    if current:
        commands.append(current)
    return [command for command in commands if command]


def option_value(argv, *names):
    for i, token in enumerate(argv[:-1]):
        if token in names:
            return argv[i + 1]
    return None


def check_safetensors(path):
    check(os.path.isfile(path), f"the export wrote no {path}")
    with open(path, "rb") as file:
        (header_size,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(header_size))
    tensors = [name for name in header if name != "__metadata__"]
    check(tensors, f"{path} holds no tensors")
    return tensors


def check_state_dir_default(sandbox, readme):
    """README's configuration table, `fsdpd --help` and fsdpd itself agree on --state-dir."""
    row = next((line for line in readme.splitlines() if line.startswith("| fsdpd | `--state-dir`")),
               None)
    check(row is not None, "README's configuration table has no fsdpd --state-dir row")
    documented = row.split("|")[3].strip().replace("`", "")
    help_text = sandbox.run([sandbox.binary("fsdpd"), "--help"]).stdout
    help_line = next(line for line in help_text.splitlines() if "--state-dir" in line)
    helped = help_line[help_line.rindex("(") + 1:help_line.rindex(")")]
    check(documented == helped,
          f"--state-dir: README says {documented!r}, fsdpd --help {helped!r}")
    # And what fsdpd does: $XDG_STATE_HOME/fsdpd when it is set, else ~/.local/state/fsdpd.
    xdg = os.path.join(sandbox.dir, "xdg-state")
    for extra, expected in (({}, os.path.join(sandbox.home, ".local", "state", "fsdpd")),
                            ({"XDG_STATE_HOME": xdg}, os.path.join(xdg, "fsdpd"))):
        sandbox.env.update(extra)
        log = f"default-state-{len(extra)}.log"
        process = sandbox.start([sandbox.binary("fsdpd"), "--listen", "127.0.0.1:0",
                                 "--metrics-listen", ""], log)
        sandbox.env.pop("XDG_STATE_HOME", None)
        wait_until(lambda: "fsdpd listening on" in sandbox.log_text(log) or
                   process.poll() is not None, 30, "fsdpd with the default state folder")
        process.terminate()
        process.wait(timeout=30)
        check(f"state in {expected}," in sandbox.log_text(log),
              f"with {extra or 'no XDG_STATE_HOME'} the state is not in {expected}:\n" +
              sandbox.log_text(log))
    print(f"--state-dir default: {documented}, as README, --help and fsdpd say")


def run_tour(sandbox, source_dir, lines):
    tour_dir = os.path.join(sandbox.dir, "tour")
    shutil.copytree(os.path.join(source_dir, "examples"), os.path.join(tour_dir, "examples"))
    submitted = []  # job ids in the order submit printed them
    watched = set()  # jobs followed to their end
    cancelled = set()
    workers_started = 0
    ran = 0
    for number, line in enumerate(lines, 1):
        tokens = shlex.split(line, comments=True)
        if not tokens:
            continue  # a comment continuing the line above
        ran += 1
        commands = programs(tokens)
        names = [command[0] for command in commands]
        label = f"README tour line {number}: {line.split('#')[0].strip()}"
        print(f"$ {line.split('  #')[0].rstrip()}", flush=True)
        for job_id in re.findall(r"\bjob-\d+\b", " ".join(tokens)):
            check(job_id in submitted,
                  f"{label}: uses {job_id}, but the tour's submits printed {submitted}")

        if tokens[-1] == "&":
            process = sandbox.start(line, f"line{number}.log", cwd=tour_dir)
            if "fsdpd" in names:
                wait_until(lambda: sandbox.serving() or process.poll() not in (None, 0), 30,
                           f"the coordinator of line {number}")
                check(sandbox.serving(), f"{label}: the coordinator did not start")
            workers_started += names.count("fsdpd-worker")
            if "fsdpd-worker" in names:
                wait_until(lambda: sandbox.idle_workers() >= workers_started, 60,
                           f"{workers_started} idle workers after line {number}")
            continue

        for name in names:
            sandbox.binary(name)  # the built program, not one installed elsewhere
        result = sandbox.run(line, timeout=600, cwd=tour_dir)
        sys.stdout.write(result.stdout[-3000:])
        check(result.returncode == 0,
              f"{label}: exit {result.returncode}\nstdout:\n{result.stdout[-3000:]}\n"
              f"stderr:\n{result.stderr[-3000:]}")
        for argv in commands:
            if argv[0] != "fsdpctl":
                continue
            verb = next((t for t in argv[1:] if not t.startswith("-")), "")
            ids = re.findall(r"\bjob-\d+\b", " ".join(argv))
            if verb in ("submit", "resubmit"):
                printed = re.search(r"\bjob-\d+\b", result.stdout)
                check(printed is not None, f"{label}: submit printed no job id")
                submitted.append(printed.group(0))
                if "--watch" in argv:
                    watched.add(printed.group(0))
                    check("SUCCEEDED" in result.stdout,
                          f"{label}: the watched job did not end SUCCEEDED")
            elif verb == "list" and "--label" in argv:
                check(re.search(r"\bjob-\d+\b", result.stdout), f"{label}: no job listed")
            elif verb == "describe":
                check(ids[0] in result.stdout and "origin" in result.stdout,
                      f"{label}: describe does not show {ids[0]} and its origin")
            elif verb == "list":
                for job_id in submitted:
                    check(job_id in result.stdout, f"{label}: {job_id} is not listed")
            elif verb == "status" and "--json" in argv:
                status = json.loads(result.stdout)
                check(status["id"] == ids[0], f"{label}: status of {status['id']}")
                if ids[0] in watched:
                    check(status["state"] == "SUCCEEDED", f"{label}: state {status['state']}")
            elif verb == "watch":
                check("SUCCEEDED" in result.stdout, f"{label}: watch did not show SUCCEEDED")
            elif verb == "logs":
                check(result.stdout.strip(), f"{label}: no log lines")
            elif verb == "export":
                tensors = check_safetensors(
                    os.path.join(tour_dir, option_value(argv, "-o", "--output")))
                print(f"  ({len(tensors)} tensors, e.g. {tensors[0]})")
            elif verb == "workers":
                check(result.stdout.count("\n") >= workers_started,
                      f"{label}: fewer than {workers_started} workers listed")
            elif verb == "cancel":
                check("CANCELLED" in result.stdout, f"{label}: the job is not CANCELLED")
                cancelled.add(ids[0])
    check(ran > 0, "the tour has no commands")
    check(workers_started > 0 and submitted, "the tour starts no workers or submits no job")
    print(f"the tour's {ran} lines ran as written; jobs {submitted}, cancelled {sorted(cancelled)}")


def main(source_dir, build_dir):
    with open(os.path.join(source_dir, "README.md")) as file:
        readme = file.read()
    lines = tour_lines(readme)
    sandbox = Sandbox(build_dir, "fsdpd-tour-")
    sandbox.use_ports()
    ok = False
    try:
        check_state_dir_default(sandbox, readme)
        run_tour(sandbox, source_dir, lines)
        ok = True
    finally:
        sandbox.finish(ok)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
