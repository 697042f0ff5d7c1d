"""forward.drift's "superseded": upstream's own code must do what the patch does.

Fixture releases (fixtures/drift/, read from a prepared drift cache, no network) for the
flashinfer quantize-ops topic: ``op-only`` registers ``flashinfer::fp4_quantize`` as 0.6.12
to 0.7.4 do, while the public functions never call it; ``partial`` routes fp4_quantize
alone; ``complete`` routes every entry point.  Only ``complete`` supersedes the patch.
And the real pristine 0.7.4 tree: not superseded (its public functions do not trace).
"""

from __future__ import annotations

import json
import pathlib
import shutil
from typing import Any

import pytest

from fp4graph.forward import drift
from fp4graph.model import projects
from fp4graph.model.config import Settings
from fp4graph.model.series import Patch, Series
from fp4graph.wheels.apply import split_diff

from .conftest import FI, FIXTURES

DRIFT = FIXTURES / "drift"
PATCH = Patch.load(DRIFT / "0001-quantize-ops.patch")


def release_files(settings: Settings, source: pathlib.Path, version: str = "0.7.99") -> drift.ReleaseFiles:
    """A drift cache holding the release files under ``source``, as a run would leave it."""
    release = drift.Release(project=FI, version=version,
                            filename=f"flashinfer_python-{version}-py3-none-any.whl",
                            url="file:///nonexistent/never-read.whl")
    files = drift.ReleaseFiles(settings, release)
    known = {}
    for member in projects.get(FI).upstream_fixes[0].members:
        present = (source / member).is_file()
        known[member] = present
        if present:
            (files.root / member).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source / member, files.root / member)
    files.root.mkdir(parents=True, exist_ok=True)
    files.index_path.write_text(json.dumps({"known": known, "roots": ["flashinfer"]}))
    return drift.ReleaseFiles(settings, release)


def classify(checkout: Settings, tmp_path: pathlib.Path, name: str) -> drift.Cell:
    series = Series(project=FI, version="0.6.3", directory=DRIFT, patches=(PATCH,))
    files = release_files(checkout, DRIFT / name)
    files.ensure({d.repo_path for d in split_diff(PATCH)})  # all known: reads nothing
    (cell,) = drift.classify_release(files, series, tmp_path)
    return cell


@pytest.fixture
def checkout(tmp_path: pathlib.Path) -> Any:
    return Settings(repo=tmp_path / "repo", cache_dir=tmp_path / "cache")


def test_an_op_the_public_functions_do_not_call_supersedes_nothing(checkout, tmp_path) -> None:
    cell = classify(checkout, tmp_path, "op-only")
    assert (cell.status, cell.topic) == ("conflicts", "fp4-quantize-ops"), cell


def test_one_entry_point_of_seven_leaves_the_patch_needed(checkout, tmp_path) -> None:
    cell = classify(checkout, tmp_path, "partial")
    assert cell.status == "conflicts", cell
    assert "not superseded: upstream has part of it" in cell.detail
    assert "fp4_quantize() traces as a torch.ops.flashinfer op; but not: nvfp4_quantize()" in cell.detail
    assert "silu_and_mul_scaled_nvfp4_experts_quantize()" in cell.detail


def test_every_entry_point_an_op_supersedes_the_patch(checkout, tmp_path) -> None:
    cell = classify(checkout, tmp_path, "complete")
    assert cell.status == "superseded", cell
    assert cell.detail.startswith("flashinfer's public fp4 quantize functions trace as")


def test_a_patch_is_superseded_only_when_every_topic_is(checkout) -> None:
    files = release_files(checkout, DRIFT / "complete")
    findings = drift.detect_fixes(files, FI)
    both = Patch.load(DRIFT / "0001-quantize-ops.patch")
    text = both.path.read_text().replace("Topic: fp4-quantize-ops", "Topic: fp4-quantize-ops, mm-fp4-op")
    both_path = checkout.repo / "0002-both.patch"
    both_path.parent.mkdir(parents=True)
    both_path.write_text(text)
    assert drift.superseding(findings, PATCH)[0]
    assert drift.superseding(findings, Patch.load(both_path)) == ([], [])  # mm_fp4 not covered


def test_function_source_reads_decorators_and_guarded_definitions() -> None:
    text = ("import torch\ntry:\n    import x\nexcept ImportError:\n    pass\nif True:\n"
            "    @torch.library.custom_op('flashinfer::f', mutates_args=())\n    def f(a):\n"
            "        return a\n\n\ndef g():\n    pass\n")
    assert drift.function_source(text, "f") == (
        "    @torch.library.custom_op('flashinfer::f', mutates_args=())\n    def f(a):\n"
        "        return a\n")
    assert drift.function_source(text, "h") is None
    assert drift.function_source("def (", "f") is None


@pytest.mark.slow
def test_pristine_0_7_4_does_not_supersede_the_quantize_ops(wheel_tree, checkout) -> None:
    """0.7.4 registers torch.ops.flashinfer.fp4_quantize; the public entry points still do
    not trace: a detector keyed on that registration called the patch superseded."""
    tree = wheel_tree(FI, "0.7.4", patched=False)
    member = "flashinfer/quantization/fp4_quantization.py"
    assert 'torch.library.custom_op("flashinfer::fp4_quantize"' in (tree / member).read_text()
    findings = drift.detect_fixes(release_files(checkout, tree, "0.7.4"), FI)
    assert drift.superseding(findings, PATCH)[0] == []
    assert all(not f.complete for f in findings), [f.describe() for f in findings]
