"""fp4graph.model.warmup: the fp4 kinds sglang's warm-up requests, one row per release."""

from __future__ import annotations

import pytest

from fp4graph.model import stacks, warmup
from harness.checkout import REPO


def test_every_sglang_stack_has_a_row() -> None:
    catalog = stacks.load(REPO / "patches" / "stacks.toml")
    missing = [s.name for s in catalog.sglang_stacks() if catalog.versions(s)["sglang"] not in warmup.DEFAULT_KINDS]
    assert not missing, f"{missing}: add their sglang releases to fp4graph.model.warmup.DEFAULT_KINDS"


def test_the_cutlass_moe_runner_adds_its_module() -> None:
    assert warmup.requested("0.5.9") == ("quantization", "gemm_cutlass")
    assert warmup.requested("0.5.11", "flashinfer_cutlass") == ("quantization", warmup.MOE_CUTLASS)


def test_a_release_without_a_row_names_the_table() -> None:
    with pytest.raises(KeyError, match=r"sglang 9\.9\.9 has no row in fp4graph\.model\.warmup\.DEFAULT_KINDS"):
        warmup.requested("9.9.9")
