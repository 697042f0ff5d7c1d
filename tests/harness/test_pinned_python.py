"""harness.pinned_python: which of a release's pins a child follows (no pip run here)."""

from __future__ import annotations

import importlib.metadata
import pathlib
import subprocess

import pytest

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


def test_the_cute_dsl_pin_is_followed_only_where_flashinfer_needs_it(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FlashInfer 0.6.17 gets sglang's nvidia-cutlass-dsl pin (without its cu13 extra) and
    the package's dsl_packages; another FlashInfer nothing."""
    tree = _sglang(tmp_path / "sglang", "nvidia-cutlass-dsl[cu13]==4.6.2")
    built: list[list[str]] = []

    def fake_tree(pins: list[str], cache: pathlib.Path) -> pathlib.Path:
        built.append(pins)
        return cache / "dsl"

    monkeypatch.setattr(pinned_python, "tree", fake_tree)
    cache = tmp_path / "cache"
    assert pinned_python.cute_dsl_path(tree, "0.6.18", cache) == []
    assert pinned_python.cute_dsl_path(tree, "0.6.17", cache) == [
        cache / "dsl", cache / "dsl" / "nvidia_cutlass_dsl" / "dsl_packages"]
    assert built == [["nvidia-cutlass-dsl==4.6.2"]]


def test_a_release_without_the_cute_dsl_pin_is_named(tmp_path: pathlib.Path) -> None:
    tree = _sglang(tmp_path, "transformers==5.12.1")
    with pytest.raises(pinned_python.PinnedPythonError, match=r"sglang-9\.0\.0\.dist-info/METADATA: no nvidia-cutlass-dsl"):
        pinned_python.cute_dsl_path(tree, "0.6.17", tmp_path / "cache")


def test_distributions_sharing_a_directory_are_merged(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pip's --target skips a top-level directory that exists; the tree keeps both."""
    target = tmp_path / "tree"
    target.mkdir()

    def fake_pip(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        staging = pathlib.Path(argv[argv.index("--target") + 1])
        (staging / "cuda").mkdir()
        (staging / "cuda" / f"{argv[-1]}.py").write_text("")
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(pinned_python.subprocess, "run", fake_pip)
    pinned_python._pip_target(target, "bindings")
    pinned_python._pip_target(target, "core")
    assert sorted(p.name for p in (target / "cuda").iterdir()) == ["bindings.py", "core.py"]
    assert [p.name for p in tmp_path.iterdir()] == ["tree"]  # no staging left
