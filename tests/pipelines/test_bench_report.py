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


def _stats(median: float, lo: float, hi: float) -> dict[str, object]:
    return {"median": median, "ci95": [lo, hi]}


def _row(op: str, m: int, cell: tuple[float, float, float], control: float) -> dict[str, object]:
    return {"op": op, "M": m, "us": {"P1": 10.0, "P2": 10.0, "Q1": 10.0, "Q2": 10.0, "I": 10.0},
            "ratios": {"patched/pristine": _stats(*cell),
                       "pristine/pristine": _stats(control, control - 0.01, control + 0.01),
                       "patched/patched": _stats(1.0, 0.99, 1.01)}}


def test_cells_over_the_bar_are_named_against_the_runs_own_noise() -> None:
    rows = [_row("fp4_quantize", 1, (1.004, 1.0, 1.008), 1.010),
            _row("nvfp4_quantize", 1, (1.012, 1.003, 1.024), 1.0),
            _row("mxfp4_quantize", 1, (1.030, 1.02, 1.04), 1.0)]
    noise = {"max_abs_control_median_minus_1": 0.010, "median_abs_control_median_minus_1": 0.0,
             "max_control_ci95_halfwidth": 0.01, "median_control_ci95_halfwidth": 0.01}
    text = report({**SMOKE, "eager": {"rows": rows, "noise": noise}})
    assert "1 of 3 cells meet the bar" in text
    assert "nvfp4_quantize M=1 1.012 [1.003, 1.024] (within the run's control noise)" in text
    assert "mxfp4_quantize M=1 1.030 [1.020, 1.040] (**beyond** the run's control noise)" in text


def test_import_ratio_is_decided_against_the_goal() -> None:
    from fp4bench.imports import decide, parse_importtime

    assert decide(_stats(1.10, 1.08, 1.12), 1.05).startswith("over 1.05")
    assert decide(_stats(1.01, 0.99, 1.04), 1.05).startswith("within 1.05")
    assert decide(_stats(1.04, 1.02, 1.07), 1.05).startswith("undecided")
    err = ("import time: self [us] | cumulative | imported package\n"
           "import time:       120 |        500 |   flashinfer.fused_moe.core\n"
           "import time:      2000 |      90000 | flashinfer\n")
    assert parse_importtime(err) == {"flashinfer.fused_moe.core": [120, 500],
                                     "flashinfer": [2000, 90000]}
