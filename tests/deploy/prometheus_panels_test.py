#!/usr/bin/env python3
"""Checks prometheus_panels.py's verdicts against a stand-in for Prometheus' HTTP API: a panel
without data fails, and the kernel throughput panels are skipped only when the job's spec
expects no hardware counters, whatever the metrics say. prometheus_dashboard_test.sh runs the
tool against a real Prometheus, but only with a CPU job, which never has counters.

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

    CUDA_WITH_COUNTERS = ("parallel: {world_size: 1, device: cuda}\n"
                          "profile: {start_step: 2, steps: 1, counters: true}\n")
    CPU_WITH_COUNTERS = ("parallel: {world_size: 2, device: cpu}\n"
                         "profile: {start_step: 2, steps: 1, counters: true}\n")

    def test_every_panel_with_data_passes(self):
        code, output = self.run_panels(self.CUDA_WITH_COUNTERS, {
            "fsdpd_train_loss": 2, "fsdpd_kernel_sm_throughput_ratio": 3})
        self.assertEqual(code, 0, output)
        self.assertNotIn("SKIP", output)

    def test_missing_counters_fail_when_the_spec_expects_them(self):
        # A CUDA job with counters on, and no counter series: a renamed or lost metric, which
        # must not read as "the backend has no counters".
        code, output = self.run_panels(self.CUDA_WITH_COUNTERS, {"fsdpd_train_loss": 2})
        self.assertEqual(code, 1, output)
        self.assertIn("EMPTY Kernel SM throughput", output)

    def test_counters_are_skipped_when_the_spec_has_none(self):
        code, output = self.run_panels(self.CPU_WITH_COUNTERS, {"fsdpd_train_loss": 2})
        self.assertEqual(code, 0, output)
        self.assertIn("SKIP  Kernel SM throughput", output)
        code, output = self.run_panels(
            "parallel: {device: cuda}\nprofile: {steps: 1, counters: false}\n",
            {"fsdpd_train_loss": 2})
        self.assertEqual(code, 0, output)

    def test_a_panel_without_data_fails(self):
        code, output = self.run_panels(self.CPU_WITH_COUNTERS, {})
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
