#!/usr/bin/env python3
"""Checks deploy/grafana/fsdpd.json offline: its structure, that every query parses as PromQL
(promtool), that per-job panels follow the `job` variable, and that the metrics operators need
are all on it. tests/deploy/prometheus_dashboard_test.sh runs the same queries against a live
Prometheus.

  dashboard_test.py SOURCE_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard_queries  # noqa: E402

SOURCE_DIR = os.environ.get("FSDPD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "../.."))
DASHBOARD = os.path.join(SOURCE_DIR, "deploy/grafana/fsdpd.json")
QUERIES_SCRIPT = os.path.join(SOURCE_DIR, "tests/deploy/dashboard_queries.py")

# Series without a `job` label of their own: coordinator-wide counts.
COORDINATOR_METRICS = {
    "fsdpd_jobs", "fsdpd_workers", "fsdpd_rpc_requests_total", "fsdpd_rpc_duration_seconds_bucket",
    "fsdpd_rpc_duration_seconds_count", "fsdpd_rpc_first_message_seconds_bucket",
    "fsdpd_rpc_first_message_seconds_count",
}
# What the dashboard must show (README.md's metric list).
REQUIRED_METRICS = {
    "fsdpd_train_loss", "fsdpd_job_eval_loss", "fsdpd_train_tokens_per_second",
    "fsdpd_train_mfu_ratio",
    "fsdpd_train_step_duration_seconds_sum", "fsdpd_train_step_duration_seconds_count",
    "fsdpd_train_step_duration_seconds_bucket", "fsdpd_comm_exposed_seconds_total",
    "fsdpd_gpu_memory_peak_bytes", "fsdpd_gpu_memory_used_bytes", "fsdpd_gpu_memory_reserved_bytes",
    "fsdpd_kernel_gpu_seconds_total",
    "fsdpd_kernel_sm_throughput_ratio", "fsdpd_kernel_dram_throughput_ratio", "fsdpd_jobs",
    "fsdpd_workers", "fsdpd_rpc_duration_seconds_bucket", "fsdpd_rpc_first_message_seconds_bucket",
}
SELECTOR = re.compile(r"\b(fsdpd_\w+)\s*(\{[^}]*\})?")


def promtool_check(expressions):
    """Runs promtool over the expressions as recording rules; returns (ok, output)."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "queries.rules.yml")
        rules = [{"record": f"dashboard:query_{index}", "expr": expr}
                 for index, expr in enumerate(expressions)]
        with open(path, "w", encoding="utf-8") as file:
            # JSON is YAML, so no YAML library is needed to write the rule file.
            json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, file)
        result = subprocess.run(["promtool", "check", "rules", path], capture_output=True,
                                text=True, check=False)
        return result.returncode == 0, result.stdout + result.stderr


class DashboardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(DASHBOARD, encoding="utf-8") as file:
            cls.dashboard = json.load(file)
        cls.queries = dashboard_queries.extract(cls.dashboard)
        cls.raw_expressions = [
            target["expr"]
            for panel in dashboard_queries.iterate_panels(cls.dashboard["panels"])
            for target in panel.get("targets", [])
        ]

    def test_job_variable_selects_jobs_by_regex(self):
        variables = {v["name"]: v for v in self.dashboard["templating"]["list"]}
        self.assertIn("job", variables)
        job = variables["job"]
        self.assertEqual(job["type"], "query")
        self.assertIn("label_values(", job["definition"])
        self.assertTrue(job["definition"].rstrip().endswith("job)"), job["definition"])
        # A series every job has from submission, not one that starts with the first step.
        self.assertEqual(job["definition"], "label_values(fsdpd_job_info, job)")
        self.assertTrue(job["multi"] and job["includeAll"])
        self.assertEqual(job["allValue"], ".*")
        self.assertIn("datasource", variables)

    def test_every_panel_has_a_query_and_a_unique_id(self):
        ids = [p["id"] for p in dashboard_queries.iterate_panels(self.dashboard["panels"])]
        self.assertEqual(len(ids), len(set(ids)), "panel ids repeat")
        titled = {q["panel"] for q in self.queries}
        for panel in dashboard_queries.iterate_panels(self.dashboard["panels"]):
            if panel["type"] != "row":
                self.assertIn(panel["title"], titled)

    def test_panels_do_not_overlap(self):
        cells = {}
        for panel in dashboard_queries.iterate_panels(self.dashboard["panels"]):
            grid = panel["gridPos"]
            self.assertLessEqual(grid["x"] + grid["w"], 24, panel["title"])
            for x in range(grid["x"], grid["x"] + grid["w"]):
                for y in range(grid["y"], grid["y"] + grid["h"]):
                    self.assertNotIn((x, y), cells,
                                     f'"{panel["title"]}" overlaps "{cells.get((x, y))}"')
                    cells[(x, y)] = panel["title"]

    def test_required_metrics_are_shown(self):
        shown = {m.group(1) for e in self.raw_expressions for m in SELECTOR.finditer(e)}
        self.assertEqual(REQUIRED_METRICS - shown, set())

    def test_per_job_series_follow_the_job_variable(self):
        for expr in self.raw_expressions:
            for match in SELECTOR.finditer(expr):
                if match.group(1) in COORDINATOR_METRICS:
                    continue
                self.assertIn('job=~"$job"', match.group(2) or "",
                              f"{match.group(1)} ignores $job in: {expr}")

    def test_kernel_panels_are_marked(self):
        requires = {(q["panel"], q["ref"]): q["requires"] for q in self.queries}
        self.assertEqual(requires[("Top kernels by GPU time", "A")], "profile")
        self.assertEqual(requires[("SM vs HBM throughput per kernel", "Verdict")], "counters")
        self.assertIsNone(requires[("Loss", "A")])

    def test_queries_parse_as_promql(self):
        expressions = [q["expr"] for q in self.queries]
        ok, output = promtool_check(expressions)
        self.assertTrue(ok, output)
        self.assertIn(f"SUCCESS: {len(expressions)} rules found", output)

    def test_promtool_check_rejects_a_broken_query(self):
        # Shows that test_queries_parse_as_promql would catch a typo.
        ok, output = promtool_check(['sum by (job) (rate(fsdpd_train_loss{job=~".+"}[30s])'])
        self.assertFalse(ok, output)


def promtool_evaluate(input_series, expression_tests):
    """Evaluates expressions on synthetic series with `promtool test rules`."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "queries.test.yml")
        with open(path, "w", encoding="utf-8") as file:
            json.dump({"evaluation_interval": "15s", "tests": [{
                "interval": "15s", "input_series": input_series,
                "promql_expr_test": expression_tests}]}, file)
        result = subprocess.run(["promtool", "test", "rules", path], capture_output=True,
                                text=True, check=False)
        return result.returncode == 0, result.stdout + result.stderr


class DashboardSemanticsTest(unittest.TestCase):
    """Evaluates panels' queries on synthetic series shaped like fsdpd's, offline."""

    @classmethod
    def setUpClass(cls):
        with open(DASHBOARD, encoding="utf-8") as file:
            queries = dashboard_queries.extract(json.load(file), job_regex="j1",
                                                rate_interval="1m")
        cls.expr = {(q["panel"], q["ref"]): q["expr"] for q in queries}

    def evaluate(self, input_series, expr, samples):
        return promtool_evaluate(
            [{"series": series, "values": values} for series, values in input_series],
            [{"expr": expr, "eval_time": "5m", "exp_samples": [
                {"labels": labels, "value": value} for labels, value in samples]}])

    def kernel_series(self, job, kernel, sm, dram):
        return [(f'fsdpd_kernel_sm_throughput_ratio{{job="{job}", kernel="{kernel}"}}',
                 f"{sm}x30"),
                (f'fsdpd_kernel_dram_throughput_ratio{{job="{job}", kernel="{kernel}"}}',
                 f"{dram}x30")]

    def test_verdicts_classify_kernels(self):
        series = (self.kernel_series("j1", "gemm", 0.8, 0.3) +
                  self.kernel_series("j1", "rmsnorm", 0.2, 0.7) +
                  self.kernel_series("j1", "embedding", 0.1, 0.2) +
                  # No hardware counters: left out rather than called latency-bound.
                  self.kernel_series("j1", "other", -1, -1) +
                  # Another job: not selected.
                  self.kernel_series("j2", "gemm", 0.9, 0.1))
        expr = self.expr[("SM vs HBM throughput per kernel", "Verdict")]
        ok, output = self.evaluate(series, expr, [
            ('{job="j1", kernel="gemm", verdict="compute-bound"}', 1),
            ('{job="j1", kernel="rmsnorm", verdict="memory-bound"}', 1),
            ('{job="j1", kernel="embedding", verdict="latency-or-mixed"}', 1)])
        self.assertTrue(ok, output)
        ok, output = self.evaluate(series, self.expr[("SM vs HBM throughput per kernel", "HBM")],
                                   [('{job="j1", kernel="gemm"}', 0.3),
                                    ('{job="j1", kernel="rmsnorm"}', 0.7),
                                    ('{job="j1", kernel="embedding"}', 0.2)])
        self.assertTrue(ok, output)

    def test_a_wrong_verdict_is_caught(self):
        expr = self.expr[("SM vs HBM throughput per kernel", "Verdict")]
        ok, _ = self.evaluate(self.kernel_series("j1", "gemm", 0.8, 0.3), expr,
                              [('{job="j1", kernel="gemm", verdict="memory-bound"}', 1)])
        self.assertFalse(ok)

    def test_step_time_and_exposed_communication_per_step(self):
        # Two steps per 15 s scrape at 0.5 s each; each rank exposes 0.1 s per step.
        series = [
            ('fsdpd_train_step_duration_seconds_count{job="j1"}', "0+2x30"),
            ('fsdpd_train_step_duration_seconds_sum{job="j1"}', "0+1x30"),
            ('fsdpd_comm_exposed_seconds_total{job="j1", rank="0"}', "0+0.2x30"),
            ('fsdpd_comm_exposed_seconds_total{job="j1", rank="1"}', "0+0.2x30"),
        ]
        panel = "Step time and exposed communication"
        ok, output = self.evaluate(series, self.expr[(panel, "A")], [('{job="j1"}', 0.5)])
        self.assertTrue(ok, output)
        # Rounded: rates over scrapes are not exact in binary floating point.
        ok, output = self.evaluate(series, f'round({self.expr[(panel, "C")]}, 0.001)',
                                   [('{job="j1"}', 0.1)])
        self.assertTrue(ok, output)

    def test_a_stopped_job_draws_no_step_time_line(self):
        # The job stopped stepping at minute 2: its counters stay flat, so every rate is 0.
        # Each query of the panel gives nothing for it, not NaN from 0/0.
        series = [
            ('fsdpd_train_step_duration_seconds_count{job="j1"}', "0+2x8 16x22"),
            ('fsdpd_train_step_duration_seconds_sum{job="j1"}', "0+1x8 8x22"),
            ('fsdpd_train_step_duration_seconds_bucket{job="j1", le="1"}', "0+2x8 16x22"),
            ('fsdpd_train_step_duration_seconds_bucket{job="j1", le="+Inf"}', "0+2x8 16x22"),
            ('fsdpd_comm_exposed_seconds_total{job="j1", rank="0"}', "0+0.2x8 1.6x22"),
        ]
        panel = "Step time and exposed communication"
        for ref in ("A", "B", "C"):
            ok, output = self.evaluate(series, self.expr[(panel, ref)], [])
            self.assertTrue(ok, f"query {ref}: {output}")

    def test_kernel_panels_keep_a_finished_jobs_window(self):
        # The job's kernel series left /metrics at minute 3 (a staleness marker); at minute 5
        # the panels still show its last values, over the dashboard's range.
        with open(DASHBOARD, encoding="utf-8") as file:
            queries = dashboard_queries.extract(json.load(file), job_regex="j1",
                                                rate_interval="1m", range_window="1h")
        expr = {(q["panel"], q["ref"]): q["expr"] for q in queries}
        series = [
            ('fsdpd_kernel_gpu_seconds_total{job="j1", kernel="gemm"}', "0 2 3 stale"),
            ('fsdpd_kernel_sm_throughput_ratio{job="j1", kernel="gemm"}', "0.8 0.8 0.8 stale"),
            ('fsdpd_kernel_dram_throughput_ratio{job="j1", kernel="gemm"}', "0.3 0.3 0.3 stale"),
        ]
        ok, output = self.evaluate(series, expr[("Kernel GPU time, profiled total", "A")],
                                   [('{kernel="gemm"}', 3)])
        self.assertTrue(ok, output)
        ok, output = self.evaluate(series, expr[("SM vs HBM throughput per kernel", "SM")],
                                   [('{job="j1", kernel="gemm"}', 0.8)])
        self.assertTrue(ok, output)
        ok, output = self.evaluate(
            series, expr[("SM vs HBM throughput per kernel", "Verdict")],
            [('{job="j1", kernel="gemm", verdict="compute-bound"}', 1)])
        self.assertTrue(ok, output)
        # Shown to be needed: the bare series are gone by then.
        ok, _ = self.evaluate(series, 'fsdpd_kernel_sm_throughput_ratio{job="j1"}',
                              [('{__name__="fsdpd_kernel_sm_throughput_ratio", job="j1", '
                                'kernel="gemm"}', 0.8)])
        self.assertFalse(ok)

    def test_top_kernels_rank_by_gpu_time(self):
        series = [(f'fsdpd_kernel_gpu_seconds_total{{job="j1", kernel="k{index}"}}',
                   f"0+{index}x30") for index in range(1, 13)]
        expr = self.expr[("Top kernels by GPU time", "A")]
        # Ten of twelve, the busiest, in GPU seconds per second (index / 15 s).
        ok, output = self.evaluate(series, expr, [
            (f'{{job="j1", kernel="k{index}"}}', index / 15) for index in range(3, 13)])
        self.assertTrue(ok, output)


class DashboardQueriesScriptTest(unittest.TestCase):
    def run_script(self, dashboard, *arguments):
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "dashboard.json")
            with open(path, "w", encoding="utf-8") as file:
                json.dump(dashboard, file)
            return subprocess.run([sys.executable, QUERIES_SCRIPT, path, *arguments],
                                  capture_output=True, text=True, check=False)

    def test_replaces_job_with_the_given_regex(self):
        dashboard = {"panels": [{"id": 1, "type": "timeseries", "title": "Loss", "targets": [
            {"refId": "A", "expr": 'rate(fsdpd_train_step{job=~"$job"}[$__rate_interval])'}]}]}
        result = self.run_script(dashboard, "--job", "job-1|job-2", "--rate-interval", "5s")
        self.assertEqual(result.returncode, 0, result.stderr)
        queries = json.loads(result.stdout)
        self.assertEqual(queries[0]["expr"], 'rate(fsdpd_train_step{job=~"job-1|job-2"}[5s])')

    def test_panel_without_query_is_an_error(self):
        dashboard = {"panels": [{"id": 1, "type": "timeseries", "title": "Empty", "targets": []}]}
        result = self.run_script(dashboard)
        self.assertEqual(result.returncode, 1)
        self.assertIn('panel "Empty" has no query', result.stderr)

    def test_unknown_variable_is_an_error(self):
        dashboard = {"panels": [{"id": 1, "type": "stat", "title": "Rank", "targets": [
            {"refId": "A", "expr": 'fsdpd_gpu_memory_peak_bytes{rank="$rank"}'}]}]}
        result = self.run_script(dashboard)
        self.assertEqual(result.returncode, 1)
        self.assertIn("$rank", result.stderr)

    def test_unreadable_dashboard_is_an_error(self):
        result = subprocess.run([sys.executable, QUERIES_SCRIPT, "/nonexistent/dashboard.json"],
                                capture_output=True, text=True, check=False)
        self.assertEqual(result.returncode, 2)
        self.assertIn("/nonexistent/dashboard.json", result.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        SOURCE_DIR = sys.argv.pop(1)
        DASHBOARD = os.path.join(SOURCE_DIR, "deploy/grafana/fsdpd.json")
        QUERIES_SCRIPT = os.path.join(SOURCE_DIR, "tests/deploy/dashboard_queries.py")
    if shutil.which("promtool") is None:
        print("dashboard_test: promtool not found (Debian package prometheus)", file=sys.stderr)
        sys.exit(1)
    unittest.main(verbosity=2)
