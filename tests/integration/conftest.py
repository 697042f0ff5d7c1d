"""Fixtures of the integration tests: the test-size checkpoints and sglang's own verdicts.

``sglang_checks(stack)`` runs, once per session and stack, a child interpreter with the
stack's patched sglang and flashinfer trees (tests/integration/sglang_load.py), after the
release's pure-Python pins the test venv does not meet (harness.pinned_python; a second
child for the families that need a newer transformers, as the run gives them a second
venv): every matrix cell's exact launch_server arguments (piecewise off and on) through
that release's ServerArgs, and a load of every family / MoE backend / fusion combination through its
model loader.  The results are shared by the flag and checkpoint tests.
"""

from __future__ import annotations

import functools
import json
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
from matrix_cells import requests, stack_versions
from sglang_cpu import SGSIM_DIR

from fp4graph.integration import checkpoint
from fp4graph.model import config
from fp4graph.model.families import FAMILIES, Size
from harness import pinned_python
from harness.child import run_python, tail

HERE = pathlib.Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def test_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    """Every family's checkpoint at the test size, written once per session."""
    root = tmp_path_factory.mktemp("checkpoints")
    return {name: checkpoint.write_checkpoint(root / name, f, Size.TEST) for name, f in FAMILIES.items()}


@pytest.fixture(scope="session")
def sglang_checks(wheel_tree: Any, test_checkpoints: dict[str, pathlib.Path]) -> Callable[[str], dict[str, Any]]:
    """``sglang_checks(stack)`` -> ``{cell id: result}`` from that stack's patched sglang."""

    @functools.cache
    def run(stack: str) -> dict[str, Any]:
        sglang, flashinfer = stack_versions(stack)
        # The stack as users install it: each project patched where it has a series.
        fi_series = (pathlib.Path(__file__).resolve().parents[2] / "patches" / "flashinfer-python" / flashinfer
                     / "series").is_file()
        trees = [wheel_tree("sglang", sglang, patched=True),
                 wheel_tree("flashinfer-python", flashinfer, patched=fi_series)]
        # One child per transformers, as the run has one venv per transformers: the stack's
        # pin, and the newer one for families whose model type the pin lacks.
        by_path: dict[tuple[pathlib.Path, ...], list[dict[str, Any]]] = {}
        for cell in requests(sglang, test_checkpoints):
            family = FAMILIES[cell["family"]]
            pins = tuple(pinned_python.path_for(trees[0], config.default_cache_dir(), [family]))
            by_path.setdefault(pins, []).append(cell)
        data: dict[str, Any] = {}
        for pins, cells in by_path.items():
            code = (
                f"import sys; sys.path[:0] = [{str(HERE)!r}, {str(SGSIM_DIR)!r}]\n"
                "import sglang_load\n"
                f"sglang_load.main({json.dumps({'cells': cells})!r})\n"
            )
            result = run_python(code, path=[*pins, *trees], timeout=1800)
            lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT:")]
            assert result.returncode == 0 and lines, tail(result)
            data.update(json.loads(lines[-1][len("RESULT:"):]))
        return data

    return run
