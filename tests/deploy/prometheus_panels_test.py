#!/usr/bin/env python3
"""Checks prometheus_panels.py's verdicts against a stand-in for Prometheus' HTTP API: a panel
without data fails, and the kernel panels are skipped only when the job's spec runs no
profiling window, whatever the metrics say (a renamed metric must fail, not read as a skip).
prometheus_dashboard_test.sh runs the tool against a real Prometheus and fsdpd.

  prometheus_panels_test.py
"""
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prometheus_panels  # noqa: E402

QUERIES = [
    {"panel": "Loss", "ref": "A", "expr": 'fsdpd_train_loss{job=~".+"}', "instant": False,
     "requires": None},
    {"panel": "Kernel SM throughput", "ref": "A",
     "expr": 'fsdpd_kernel_sm_throughput_ratio{job=~".+"}', "instant": True,
     "requires": "counters"},
]


def fake_api(series_by_metric):
    """An api() that answers each query with the series of the first metric it names."""
    def api(url, path, parameters):
        expr = parameters.get("query", "")
        for metric, count in series_by_metric.items():
            if metric in expr:
                values = [[0, "1"]]
                return {"result": [{"metric": {"n": str(i)}, "values": values, "value": [0, "1"]}
                                   for i in range(count)]}
        return {"result": []}
    return api


class PanelsTest(unittest.TestCase):
    def run_panels(self, spec_yaml, series_by_metric):
        with tempfile.TemporaryDirectory() as directory:
            queries = os.path.join(directory, "queries.json")
            spec = os.path.join(directory, "job.yaml")
            with open(queries, "w", encoding="utf-8") as file:
                json.dump(QUERIES, file)
            with open(spec, "w", encoding="utf-8") as file:
                file.write(spec_yaml)
            output = io.StringIO()
            with mock.patch.object(prometheus_panels, "api", fake_api(series_by_metric)), \
                    redirect_stdout(output):
                code = prometheus_panels.main(
                    ["panels", "http://prometheus", queries, "--spec", spec])
            return code, output.getvalue()

    CPU_PROFILED = ("parallel: {world_size: 2, device: cpu}\n"
                    "profile: {start_step: 2, steps: 1, counters: true}\n")
    CUDA_PROFILED = "parallel: {world_size: 1, device: cuda}\nprofile: {steps: 2}\n"
    NOT_PROFILED = "parallel: {world_size: 2, device: cpu}\nprofile: {steps: 0}\n"

    def test_every_panel_with_data_passes(self):
        code, output = self.run_panels(self.CPU_PROFILED, {
            "fsdpd_train_loss": 2, "fsdpd_kernel_sm_throughput_ratio": 3})
        self.assertEqual(code, 0, output)
        self.assertNotIn("SKIP", output)

    def test_missing_throughput_ratios_fail_when_the_spec_profiles(self):
        # Every backend reports the ratios of a profiled window (counters or the analytic
        # roofline): none at all is a renamed or lost metric, not a backend without counters.
        for spec in (self.CPU_PROFILED, self.CUDA_PROFILED, "parallel: {device: cpu}\n"):
            code, output = self.run_panels(spec, {"fsdpd_train_loss": 2})
            self.assertEqual(code, 1, spec + output)
            self.assertIn("EMPTY Kernel SM throughput", output)

    def test_kernel_panels_are_skipped_without_a_profiling_window(self):
        code, output = self.run_panels(self.NOT_PROFILED, {"fsdpd_train_loss": 2})
        self.assertEqual(code, 0, output)
        self.assertIn("SKIP  Kernel SM throughput", output)

    def test_a_panel_without_data_fails(self):
        code, output = self.run_panels(self.CPU_PROFILED, {})
        self.assertEqual(code, 1, output)
        self.assertIn("EMPTY Loss", output)

    def test_absent(self):
        with mock.patch.object(prometheus_panels, "api", fake_api({"fsdpd_job_info": 1})), \
                redirect_stdout(io.StringIO()):
            self.assertEqual(prometheus_panels.main(
                ["absent", "http://prometheus", 'fsdpd_job_info{job="job-1"}']), 1)
            self.assertEqual(prometheus_panels.main(
                ["absent", "http://prometheus", 'fsdpd_train_loss{job="job-1"}']), 0)


if __name__ == "__main__":
    unittest.main()
