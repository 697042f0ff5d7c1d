"""The architecture as a contract: ``[tool.importlinter]`` in pyproject.toml.

Rooms in layers (cli > commands > integration > verify > forward > wheels > model; a lower one never
imports a higher one), no import cycles between siblings, and torch only under
fp4graph.verify (not in verify.suites, which runs torch in child interpreters), and argparse
only in fp4graph.commands (and the checkpoint writer's own entry point).
import-linter reads the source without importing it; each run is a child interpreter whose
sys.path starts at the tree under test.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]

pytest.importorskip("importlinter", reason="import-linter is a test requirement (pip install -e .[test])")


def lint_imports(root: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on ``root``'s pyproject.toml and ``root/src``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), env.get("PYTHONPATH", "")])
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True, no_logo=True))"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_package_keeps_its_contracts() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 4 kept, 0 broken." in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        pytest.param("model/errors.py", "from ..forward import prs", [
            "fp4graph.model is not allowed to import fp4graph.forward",
            "fp4graph.model.errors -> fp4graph.forward.prs",
            "- .model -> .forward (1 import)",
        ], id="upward-import"),
        pytest.param("forward/sources.py", "from . import prs", [
            "No cycles are allowed in fp4graph.forward.",
        ], id="cycle-in-a-room"),
        pytest.param("wheels/lint.py", "import torch", [
            "fp4graph.wheels is not allowed to import torch",
        ], id="torch-outside-verify"),
        pytest.param("verify/suites/gate.py", "import torch", [
            "fp4graph.verify.suites is not allowed to import torch",
        ], id="torch-in-the-suites-runner"),
        pytest.param("integration/runner.py", "import argparse", [
            "fp4graph.integration is not allowed to import argparse",
            "fp4graph.integration.runner -> argparse",
        ], id="argparse-in-the-library"),
        pytest.param("integration/checkpoint/__init__.py", "import argparse", [
            "fp4graph.integration is not allowed to import argparse",  # only its __main__ may
        ], id="argparse-in-the-checkpoint-library"),
        pytest.param("cli.py", "from argparse import Namespace", [
            "fp4graph.cli is not allowed to import argparse",  # cli parses through commands
        ], id="argparse-in-cli"),
        pytest.param("stray.py", "", [
            "fp4graph.stray",  # exhaustive: a new top-level module must join a layer
        ], id="module-in-no-layer"),
    ],
)
def test_a_broken_contract_is_caught(
    tmp_path: pathlib.Path, module: str, line: str, broken: list[str]
) -> None:
    shutil.copytree(REPO / "src" / "fp4graph", tmp_path / "src" / "fp4graph",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    path = tmp_path / "src" / "fp4graph" / module
    path.write_text((path.read_text() if path.exists() else "") + f"\n{line}\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    for text in broken:
        assert text in result.stdout, result.stdout
