"""bench/capacity_table.py on trials built by hand: the largest N that trained and the first
that failed per runner; a trial stopped by its time limit counted as undecided, never as the
boundary (below a failure, and where no failure was found); a runner that never trained; the
parameter ratios, with a note where the other runner's boundary was not reached."""
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = os.environ.get("FSDPD_SOURCE_DIR",
                            os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(SOURCE_DIR, "bench", "capacity_table.py")
HEADER = "runner\tlayers\tparams\tok\ttokens_per_s\tdriver_peak_mib\thost_peak_gb\tseconds\twhy"
TRIALS = [
    # fsdpd: 30 trains, 31 runs out of memory; 33 (above the failure) was stopped by its limit.
    "fsdpd\t29\t6101446656\t1\t12000\t77000\t-\t50\t-",
    "fsdpd\t30\t6302801920\t1\t11906\t78995\t-\t53\t-",
    "fsdpd\t31\t6504157184\t0\t-\t80727\t-\t46\texit_1_after_0_steps",
    "fsdpd\t33\t6906867712\t0\t-\t-\t-\t240\ttime_limit",
    # anchor: 19 trains; 21 stopped by its limit below the failure at 22, which is not the
    # boundary then: the row names 22 and says 21 is undecided.
    "anchor\t19\t4087930880\t1\t15030\t76000\t14.2\t40\t-",
    "anchor\t21\t4490641408\t0\t-\t-\t-\t150\ttime_limit",
    "anchor\t22\t4691996672\t0\t-\t-\t-\t30\tCUDA_out_of_memory",
    # offload: 36 trains, nothing above it failed: no boundary.
    "anchor_offload\t36\t7510933504\t1\t580\t30000\t127.6\t230\t-",
    "anchor_offload\t37\t7712288768\t0\t-\t-\t-\t240\ttime_limit",
    # a runner that never trained
    "tiny\t4\t100000000\t0\t-\t-\t-\t5\texit_1_after_0_steps",
]


class CapacityTableTest(unittest.TestCase):
    def run_table(self, lines):
        with tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False) as handle:
            handle.write("\n".join([HEADER] + lines) + "\n")
        self.addCleanup(os.unlink, handle.name)
        return subprocess.run([sys.executable, SCRIPT, handle.name], capture_output=True,
                              text=True)

    def rows(self, stdout):
        return {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
                for line in stdout.splitlines()
                if line.startswith("| ") and not line.startswith("| runner")}

    def test_boundaries_undecided_trials_and_ratios(self):
        result = self.run_table(TRIALS)
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = self.rows(result.stdout)
        self.assertEqual(rows["fsdpd"][:5], ["30", "6.30B", "11906", "77.1", "-"])
        self.assertEqual(rows["fsdpd"][5:], ["31 (exit_1_after_0_steps)", "4"])
        self.assertEqual(rows["anchor"][0], "19")
        self.assertEqual(rows["anchor"][5],
                         "22 (CUDA_out_of_memory); 21 undecided (time limit)")
        self.assertEqual(rows["anchor_offload"][0], "36")
        self.assertEqual(rows["anchor_offload"][4], "127.6")
        self.assertEqual(rows["anchor_offload"][5], "not found; 37 undecided (time limit)")
        self.assertEqual(rows["tiny"][:2], ["none", ""])
        self.assertEqual(rows["tiny"][5], "4 (exit_1_after_0_steps)")
        self.assertIn("fsdpd / anchor: 1.54x the parameters\n", result.stdout + "\n")
        self.assertIn("fsdpd / anchor_offload: 0.84x the parameters (its boundary was not "
                      "reached: fsdpd trains at most that)", result.stdout)
        self.assertNotIn("fsdpd / tiny", result.stdout)

    def test_no_trials_is_an_error(self):
        result = self.run_table([])
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("no trials in", result.stderr)


if __name__ == "__main__":
    unittest.main()
