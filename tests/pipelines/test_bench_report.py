"""The benchmark's report over what a CPU smoke run records (.ci/sessions runs `nox -s bench --
--smoke`): no measured cell, yet a report, not a traceback."""

from __future__ import annotations

import sys

from test_workflows import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from fp4bench.report import report  # noqa: E402  (benchmarks/ is not a package on the path)

SMOKE = {
    "meta": {"gpu": "CPU smoke run (no GPU; measures nothing)", "capability": "120", "torch": "2.11.0",
             "cuda": "13.0", "python": "3.11", "flashinfer": "0.6.8.post1+fp4graph.3",
             "pristine": "0.6.8.post1", "fp4graph_commit": "0" * 40, "date": "2026-12-01T00:00:00+00:00",
             "patched_tree": "/x", "patched_tree_version": "0.6.8.post1+fp4graph.3", "sm_note": None},
    "first_calls_s": {}, "pristine_first_call_s": None, "bytecode_diff": {},
    "eager": {"rows": [], "noise": {}},
    "seconds": 3.0,
}


def test_smoke_run_reports_that_nothing_was_measured() -> None:
    text = report(SMOKE)
    assert "(a) Eager per-call latency" in text
    assert "No cell was measured" in text
