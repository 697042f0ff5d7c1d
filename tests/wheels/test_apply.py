from __future__ import annotations

import pathlib
import shutil

import pytest

from fp4graph.model import series
from fp4graph.model.config import Settings
from fp4graph.model.errors import PatchError
from fp4graph.wheels import apply, trees


def pristine(settings: Settings, project: str, version: str, dest: pathlib.Path) -> pathlib.Path:
    shutil.copytree(trees.materialize(settings, project, version, patched=False), dest)
    return dest


def test_flashinfer_series_applies_and_skips_upstream_tests(checkout: Settings, tmp_path: pathlib.Path) -> None:
    tree = pristine(checkout, "flashinfer-python", "0.6.3", tmp_path / "tree")
    fixture = series.load_series(checkout.patches_dir, "flashinfer-python", "0.6.3")
    assert fixture is not None
    changed = apply.apply_series(fixture, tree)
    assert changed == {"0001-add-fixture-marker.patch": ["flashinfer/__init__.py"]}
    assert 'FP4GRAPH_FIXTURE = "applied"' in (tree / "flashinfer/__init__.py").read_text()
    assert not (tree / "tests").exists()
    # The patch itself still carries the upstream test for the pull request.
    assert "tests/utils/test_fixture_marker.py" in fixture.patches[0].files


def test_sglang_python_prefix_maps_to_wheel_root(checkout: Settings, tmp_path: pathlib.Path) -> None:
    tree = pristine(checkout, "sglang", "0.5.9", tmp_path / "tree")
    fixture = series.load_series(checkout.patches_dir, "sglang", "0.5.9")
    assert fixture is not None
    assert apply.apply_series(fixture, tree) == {
        "0001-add-fixture-marker.patch": ["python/sglang/global_config.py"]
    }
    assert 'FP4GRAPH_FIXTURE = "applied"' in (tree / "sglang/global_config.py").read_text()
    assert not (tree / "test").exists()


def test_non_applying_patch_names_patch_file_and_hunk(checkout: Settings, tmp_path: pathlib.Path) -> None:
    tree = pristine(checkout, "flashinfer-python", "0.6.3", tmp_path / "tree")
    init = tree / "flashinfer/__init__.py"
    # Upstream moved on: a context line of the hunk changed.
    init.write_text(init.read_text().replace("import importlib.util\n", "import importlib\n", 1))
    fixture = series.load_series(checkout.patches_dir, "flashinfer-python", "0.6.3")
    assert fixture is not None
    with pytest.raises(PatchError) as info:
        apply.apply_series(fixture, tree)
    message = str(info.value)
    assert "0001-add-fixture-marker.patch" in message
    assert "flashinfer/__init__.py" in message
    assert "hunk #1 of 1 (@@ -16,6 +16,8 @@)" in message
    assert "zero fuzz" in message
    # git apply is all-or-nothing: the tree is untouched.
    assert "FP4GRAPH_FIXTURE" not in init.read_text()


def test_zero_fuzz_rejects_a_patch_patch_would_fuzz(checkout: Settings, tmp_path: pathlib.Path) -> None:
    """GNU patch applies a hunk whose outer context changed (fuzz 1-2); we must not."""
    tree = pristine(checkout, "flashinfer-python", "0.6.3", tmp_path / "tree")
    init = tree / "flashinfer/__init__.py"
    text = init.read_text()
    # Change the first context line of the hunk only (line 16, blank -> comment).
    lines = text.split("\n")
    assert lines[15] == ""
    lines[15] = "# changed upstream"
    init.write_text("\n".join(lines))
    fixture = series.load_series(checkout.patches_dir, "flashinfer-python", "0.6.3")
    assert fixture is not None
    with pytest.raises(PatchError, match="hunk #1 of 1"):
        apply.apply_series(fixture, tree)


def test_missing_file_is_reported(checkout: Settings, tmp_path: pathlib.Path) -> None:
    tree = pristine(checkout, "flashinfer-python", "0.6.3", tmp_path / "tree")
    (tree / "flashinfer/__init__.py").unlink()
    fixture = series.load_series(checkout.patches_dir, "flashinfer-python", "0.6.3")
    assert fixture is not None
    with pytest.raises(PatchError, match=r"0001-add-fixture-marker.patch: flashinfer/__init__.py: No such file"):
        apply.apply_series(fixture, tree)


def test_a_revision_bump_alone_gives_a_new_patched_tree(checkout: Settings) -> None:
    """The tree's flashinfer/_build_meta.py names the +fp4graph.<revision> label, so a bump
    with the series unchanged must not find the tree of the revision before."""
    before = trees.materialize(checkout, "flashinfer-python", "0.6.3", patched=True)
    meta = "flashinfer/_build_meta.py"
    assert "+fp4graph.1" in (before / meta).read_text()
    text = checkout.stacks_file.read_text()
    old = 'version = "0.6.3"\nrevision = 1\n'
    assert old in text
    checkout.stacks_file.write_text(text.replace(old, 'version = "0.6.3"\nrevision = 2\n'))
    after = trees.materialize(checkout, "flashinfer-python", "0.6.3", patched=True)
    assert after != before and before.exists()
    assert "+fp4graph.2" in (after / meta).read_text() and "+fp4graph.1" not in (after / meta).read_text()
