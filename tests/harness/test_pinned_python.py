"""harness.pinned_python: which of a release's pins a child follows (no pip run here)."""

from __future__ import annotations

import importlib.metadata
import pathlib

from fp4graph.model.families import GLM5, LLAMA
from harness import pinned_python

VENV_TRANSFORMERS = importlib.metadata.version("transformers")


def _sglang(tmp_path: pathlib.Path, *requires: str) -> pathlib.Path:
    info = tmp_path / "sglang-9.0.0.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", "Name: sglang", "Version: 9.0.0", *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_a_pin_the_venv_does_not_meet_is_followed(tmp_path: pathlib.Path) -> None:
    tree = _sglang(tmp_path, "transformers==4.57.1", "torch==2.9.1", 'pytest; extra == "test"')
    assert pinned_python.unmet_pins(tree) == ["transformers==4.57.1"]  # torch: not followed
    assert pinned_python.unmet_pins(tree, [LLAMA]) == ["transformers==4.57.1"]


def test_a_family_that_needs_a_newer_transformers_keeps_the_venvs(tmp_path: pathlib.Path) -> None:
    """GLM-5 needs transformers >= 5.2.0: with 4.57.1 pinned it runs on the newer one."""
    tree = _sglang(tmp_path, "transformers==4.57.1")
    assert pinned_python.unmet_pins(tree, [LLAMA, GLM5]) == []
    assert pinned_python.path_for(tree, tmp_path / "cache", [GLM5]) == []


def test_a_met_pin_adds_nothing(tmp_path: pathlib.Path) -> None:
    tree = _sglang(tmp_path, f"transformers=={VENV_TRANSFORMERS}", "huggingface_hub")
    assert pinned_python.unmet_pins(tree) == []
    assert pinned_python.path_for(tree, tmp_path / "cache") == []
