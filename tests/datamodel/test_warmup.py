"""fp4graph.model.warmup: the fp4 kinds sglang's warm-up requests, one row per release (a row for
every stack, and a new release failing by name: tests/harness/test_release_tables.py)."""

from __future__ import annotations

from fp4graph.model import warmup


def test_the_cutlass_moe_runner_adds_its_module() -> None:
    assert warmup.requested("0.5.9") == ("quantization", "gemm_cutlass")
    assert warmup.requested("0.5.11", "flashinfer_cutlass") == ("quantization", warmup.MOE_CUTLASS)


