"""bench/fp8_curves.py on JSON lines built by hand: the verdict at each checkpoint against the
bound max(1% of the bf16 loss, 0.02), including the bound's two regimes and a difference just
past it; a bf16 control that stopped early (its columns empty from there on, its misses counted
over the checkpoints it reached); the CSV's columns; the picture's curves; the speed table and
an anchor's RESULT line; and a clear exit on a file without steps."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = os.environ.get("FSDPD_SOURCE_DIR",
                            os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(SOURCE_DIR, "bench", "fp8_curves.py")


def write_run(path, losses, tokens_per_second=1000.0, step_seconds=0.5, peak=2 ** 30):
    with open(path, "w") as f:
        f.write("not json: a log line the reader skips\n")
        for step, loss in losses.items():
            f.write(json.dumps({"step": step, "loss": loss, "tokens_per_second": tokens_per_second,
                                "step_seconds": step_seconds,
                                "memory_peak_bytes": peak}) + "\n")
        f.write(json.dumps({"final_step": max(losses)}) + "\n")


class Fp8CurvesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)

    def test_checkpoints_against_the_bound_with_an_early_control(self):
        steps = range(1, 401)
        bf16 = {s: 4.0 if s <= 200 else 1.0 for s in steps}
        fp8 = dict(bf16)
        fp8[100] = 4.0 + 0.039   # bound 0.04 (1% of 4): within
        fp8[200] = 4.0 - 0.041   # just past it, below: a miss
        fp8[300] = 1.0 + 0.0199  # bound 0.02 (the floor, 1% would be 0.01): within
        fp8[400] = 1.0 + 0.0201  # a miss
        control = {s: bf16[s] for s in range(1, 251)}  # stopped at step 250
        control[100] = 4.0 + 0.05  # a miss
        write_run(self.path("bf16.jsonl"), bf16, tokens_per_second=1000.0)
        write_run(self.path("fp8.jsonl"), fp8, tokens_per_second=1250.0)
        write_run(self.path("control.jsonl"), control)
        with open(self.path("anchor.log"), "w") as f:
            f.write("RESULT world=1 params=1 batch=8x1024 median_step_ms=16.384 tokens_per_s=1\n")
        result = self.run_script("--bf16", self.path("bf16.jsonl"), "--fp8", self.path("fp8.jsonl"),
                                 "--control", self.path("control.jsonl"), "--anchor",
                                 self.path("anchor.log"), "--csv", self.path("curves.csv"),
                                 "--svg", self.path("curves.svg"))
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = {int(line.split("|")[1]): [c.strip() for c in line.split("|")[2:-1]]
                for line in result.stdout.splitlines()
                if line.startswith("| ") and line.split("|")[1].strip().isdigit()}
        self.assertEqual(sorted(rows), [100, 200, 300, 400])
        self.assertEqual([rows[s][4] for s in (100, 200, 300, 400)],
                         ["yes", "**no**", "yes", "**no**"])
        self.assertEqual(rows[100][3], "0.0400")
        self.assertEqual(rows[300][3], "0.0200")
        self.assertEqual(rows[100][5:], ["4.0500", "0.0500", "**no**"])
        self.assertEqual(rows[200][5:], ["4.0000", "0.0000", "yes"])
        self.assertEqual(rows[300][5:], ["", "", ""])  # past the control's last step
        self.assertIn("4 checkpoints compared, 2 outside the bound", result.stdout)
        self.assertIn("1 of its 2 outside the same bound", result.stdout)
        self.assertIn("fp8 / bf16: 1.250×", result.stdout)
        # The anchor: 8·1024 tokens in 16.384 ms.
        self.assertIn("| FSDP2 + torch.compile | 500,000 |", result.stdout)
        with open(self.path("curves.csv")) as f:
            lines = f.read().splitlines()
        self.assertEqual(lines[0], "step,loss_bf16,loss_fp8,loss_bf16_control")
        self.assertEqual(len(lines), 401)
        self.assertEqual(lines[100], "100,4.00000,4.03900,4.05000")
        self.assertEqual(lines[300], "300,1.00000,1.01990,")
        with open(self.path("curves.svg")) as f:
            svg = f.read()
        self.assertEqual(svg.count("<polyline"), 3)
        self.assertIn("bf16 control", svg)

    def test_without_a_control_two_curves(self):
        losses = {s: 2.0 for s in range(1, 101)}
        write_run(self.path("bf16.jsonl"), losses)
        write_run(self.path("fp8.jsonl"), losses)
        result = self.run_script("--bf16", self.path("bf16.jsonl"), "--fp8",
                                 self.path("fp8.jsonl"), "--svg", self.path("two.svg"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("1 checkpoints compared, 0 outside the bound", result.stdout)
        self.assertNotIn("control", result.stdout)
        with open(self.path("two.svg")) as f:
            self.assertEqual(f.read().count("<polyline"), 2)

    def test_a_file_without_steps_is_refused_by_name(self):
        write_run(self.path("bf16.jsonl"), {1: 2.0})
        with open(self.path("empty.jsonl"), "w") as f:
            f.write("no steps here\n")
        result = self.run_script("--bf16", self.path("bf16.jsonl"), "--fp8",
                                 self.path("empty.jsonl"))
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("no steps in " + self.path("empty.jsonl"), result.stderr)


if __name__ == "__main__":
    unittest.main()
