"""bench/trace_gaps.py on a trace built by hand: one gap behind a comm-stream kernel, one
launch-spacing gap and one host gap, over two profiled steps, in the shape `fsdpctl trace`
writes (thread names, "X" events with categories kernel, comm and range)."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = os.environ.get("FSDPD_SOURCE_DIR",
                            os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(SOURCE_DIR, "bench", "trace_gaps.py")
spec = importlib.util.spec_from_file_location("trace_gaps", SCRIPT)
trace_gaps = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trace_gaps)


def kernel(tid, name, ts, dur, cat="kernel"):
    return {"ph": "X", "cat": cat, "tid": tid, "pid": 0, "name": name, "ts": ts, "dur": dur}


def thread(tid, name):
    return {"ph": "M", "name": "thread_name", "tid": tid, "pid": 0, "args": {"name": name}}


EVENTS = [
    thread(0, "host: step / unit / phase"), thread(1, "compute stream"), thread(2, "comm stream"),
    {"ph": "X", "cat": "range", "tid": 0, "pid": 0, "name": "step 1", "ts": 0, "dur": 1000},
    {"ph": "X", "cat": "range", "tid": 0, "pid": 0, "name": "step 2", "ts": 1000, "dur": 1000},
    kernel(1, "void fsdpd::cuda::(anonymous namespace)::RmsNormKernel<float>(float*)", 0, 100),
    # 120 us gap, 110 of it under the comm stream's cast: behind a comm-stream kernel
    kernel(2, "void fsdpd::cuda::(anonymous namespace)::CastKernel<float>(float const*)", 95, 125),
    kernel(1, "nvjet_gemm", 220, 300),
    # 3 us gap: launch spacing
    kernel(1, "fsdpd::cuda::(anonymous namespace)::AddKernel(float*)", 523, 77),
    # 400 us gap with nothing on the comm stream: host
    kernel(1, "fsdpd::cuda::EmbeddingKernel(int const*)", 1000, 500),
]


class TraceGapsTest(unittest.TestCase):
    def test_each_gap_gets_its_cause_per_step(self):
        figures = trace_gaps.analyse(EVENTS)
        self.assertEqual(figures["steps"], 2)
        self.assertAlmostEqual(figures["step_ms"], 1.0)
        self.assertAlmostEqual(figures["compute_ms"], (100 + 300 + 77 + 500) / 2 / 1000)
        self.assertAlmostEqual(figures["comm_ms"], 125 / 2 / 1000)
        idle = figures["idle_ms"]
        self.assertEqual(set(idle), {"behind a comm-stream kernel: CastKernel",
                                     "launch spacing (< 5 us)",
                                     "host: before EmbeddingKernel"})
        self.assertAlmostEqual(idle["behind a comm-stream kernel: CastKernel"], 120 / 2 / 1000)
        self.assertAlmostEqual(idle["launch spacing (< 5 us)"], 3 / 2 / 1000)
        self.assertAlmostEqual(idle["host: before EmbeddingKernel"], 400 / 2 / 1000)
        self.assertAlmostEqual(figures["gaps"]["host: before EmbeddingKernel"], 0.5)

    def test_only_step_ranges_count_as_steps(self):
        # The host's work between steps has ranges of its own ("report", once "step report").
        between = [{"ph": "X", "cat": "range", "tid": 0, "pid": 0, "name": name, "ts": 990,
                    "dur": 10} for name in ("report", "step report", "report hooks")]
        figures = trace_gaps.analyse(EVENTS + between)
        self.assertEqual(figures["steps"], 2)
        self.assertAlmostEqual(figures["step_ms"], 1.0)

    def test_the_command_prints_the_table_and_refuses_a_trace_without_kernels(self):
        with tempfile.TemporaryDirectory() as directory:
            good = os.path.join(directory, "trace.json")
            with open(good, "w", encoding="utf-8") as handle:
                json.dump({"traceEvents": EVENTS}, handle)
            run = subprocess.run([sys.executable, SCRIPT, good], capture_output=True, text=True)
            self.assertEqual(run.returncode, 0, run.stderr)
            self.assertIn("2 profiled steps", run.stdout)
            self.assertIn("        0.06       0.5  behind a comm-stream kernel: CastKernel\n", run.stdout)
            self.assertIn("0.26            all gaps between compute kernels", run.stdout)
            empty = os.path.join(directory, "empty.json")
            with open(empty, "w", encoding="utf-8") as handle:
                json.dump({"traceEvents": []}, handle)
            run = subprocess.run([sys.executable, SCRIPT, empty], capture_output=True, text=True)
            self.assertEqual(run.returncode, 1)
            self.assertIn("no compute-stream kernels", run.stderr)


if __name__ == "__main__":
    unittest.main()
