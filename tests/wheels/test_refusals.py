"""The build refuses a series that lacks a fix: an unresolved patch, a missing topic."""

from __future__ import annotations

import pytest

from fp4graph.model.config import Settings
from fp4graph.model.errors import PatchError
from fp4graph.wheels import build, trees
from harness.checkout import real_requirements

from .conftest import STACK, snapshot


def _mark_unresolved(settings: Settings) -> None:
    series = settings.patches_dir / "sglang/0.5.9/series"
    series.write_text("0001-add-fixture-marker.patch unresolved  # conflicts in python/sglang/x.py\n")


def test_unresolved_patch_refuses_the_build_and_keeps_wheels(checkout: Settings) -> None:
    _mark_unresolved(checkout)
    (checkout.wheels_dir / "previous.whl").write_bytes(b"an earlier build")
    before = snapshot(checkout.wheels_dir)
    with pytest.raises(PatchError, match=r"0001-add-fixture-marker.patch is unresolved \(conflicts "
                       r"in python/sglang/x.py\).*python -m fp4graph refresh sglang 0.5.9"):
        build.build(checkout, [STACK])
    assert snapshot(checkout.wheels_dir) == before
    assert sorted(p.name for p in checkout.repo.iterdir()) == ["patches", "wheels"]


def test_unresolved_patch_refuses_a_patched_tree(checkout: Settings) -> None:
    _mark_unresolved(checkout)
    with pytest.raises(PatchError, match="is unresolved"):
        trees.materialize(checkout, "sglang", "0.5.9", patched=True)


def test_series_without_a_required_topic_does_not_build(checkout: Settings) -> None:
    with real_requirements(), pytest.raises(PatchError) as info:
        build.build(checkout, [STACK])
    message = str(info.value)  # every series at fault, before anything is built
    assert "patches/flashinfer-python/0.6.3/series: no patch carries topic 'cuda-version'" in message
    assert "patches/sglang/0.5.9/series: no patch carries topic 'fp4-quantize-op'" in message
