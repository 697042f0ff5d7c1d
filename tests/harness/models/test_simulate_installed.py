"""simulate_installed: what it reports of a trace, and that it runs as the script
``python -m fp4graph install --check`` starts (the venv's python, src/ on its path, from the
checkout; no pytest path)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from typing import Any

from harness.child import SRC, TESTS
from harness.models import simulate_installed
from harness.models.expected import ATTENTION, FP4_GEMM, FP4_QUANTIZE

SCRIPT = TESTS / "harness" / "models" / "simulate_installed.py"
PATCHED: dict[str, Any] = {
    "ok": True,
    "graph_breaks": 0,
    "captures": 3,
    "graphs": [[
        {"split": False, "ops": [FP4_QUANTIZE, FP4_GEMM]},
        {"split": True, "ops": [ATTENTION]},
        {"split": False, "ops": [FP4_QUANTIZE, FP4_GEMM]},
    ]],
}


def test_a_patched_trace_has_no_problems() -> None:
    assert simulate_installed.problems(PATCHED) == []


def test_problems_name_what_differs() -> None:
    broken = copy.deepcopy(PATCHED)
    broken["graph_breaks"] = 2
    pieces = broken["graphs"][0]
    pieces[0]["ops"] = [FP4_QUANTIZE]
    pieces[2]["ops"] = [FP4_QUANTIZE]
    pieces[1]["ops"] = [ATTENTION, FP4_GEMM]
    assert simulate_installed.problems(broken) == [
        "2 graph break(s)", f"{FP4_GEMM} not in a captured piece",
    ]
    pieces[1]["split"] = False
    assert f"{ATTENTION} not a split op" in simulate_installed.problems(broken)
    assert simulate_installed.problems({**PATCHED, "graphs": []}) == ["no piecewise graph captured"]


def test_a_failed_stage_is_its_one_problem() -> None:
    report = {"ok": False, "stage": "build", "error": "KeyError", "error_text": "x" * 1000}
    (problem,) = simulate_installed.problems(report)
    assert problem == "stage build: KeyError: " + "x" * 600


def test_runs_as_a_script_from_the_checkout() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(SRC)}
    result = subprocess.run([sys.executable, str(SCRIPT.relative_to(TESTS.parent)), "--help"],
                            cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "--family FAMILY" in result.stdout and "tests/harness/models/families.py" in result.stdout
    assert "--gpu {sm100,sm120,sm121}" in result.stdout


def test_its_gpus_are_the_simulated_ones() -> None:
    """The script names them without importing torch (an emulated import costs ~50 s)."""
    from fp4graph.verify.simulate import GPUS

    assert sorted(simulate_installed.GPU_NAMES) == sorted(GPUS)
