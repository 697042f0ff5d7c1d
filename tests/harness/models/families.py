"""The model families of the whole-model simulation: one data row each.

The families are those of ``nox -s integration`` (:mod:`fp4graph.model.families`):
the same tiny ``config.json`` (its ``test`` size) with the same ModelOpt NVFP4
``quantization_config`` the integration checkpoint writer puts in it
(:func:`fp4graph.integration.checkpoint.model_config`), so the simulation and the SM120
run cover the same models.

A row is the architecture sglang resolves, its ``kind`` ("dense" or "moe": MoE rows also
run with ``--moe-runner-backend flashinfer_cutlass``), the ``config.json``, the server
arguments that select a variant (``disable_shared_experts_fusion``) and ``expect``:
attributes the built model must have (proof the variant is the one meant).  Add a family
to the integration families, or a variant row here.  DSA (NSA) families
(:data:`NSA_FAMILIES`) run with sglang's NSA attention backend and its NSA KV pool.
"""

from __future__ import annotations

import copy
from typing import Any

from fp4graph.integration import checkpoint
from fp4graph.model.families import (
    FAMILIES,
    MOE_ROWS_ALIGNMENT,
    Family,
    Size,
    by_architecture,
)
from harness.targets import versions_with_topic

NSA_FAMILIES = tuple(name for name, f in FAMILIES.items() if f.nsa)


def _row(family: Family, **extra: Any) -> dict[str, Any]:
    expect: dict[str, Any] = {}
    if family.shared_experts:  # sglang fuses the shared expert into the routed experts
        expect["num_fused_shared_experts"] = 1
    return {
        "architecture": family.architecture,
        "kind": "moe" if family.moe else "dense",
        "config": checkpoint.model_config(family, Size.TEST),
        "server_args": {},
        "expect": expect,
        **extra,
    }


ROWS: dict[str, dict[str, Any]] = {name: _row(f) for name, f in FAMILIES.items() if not f.nsa}
# DSA (NSA) models: sglang 0.5.10+ turns piecewise off for them unless
# --enforce-piecewise-cuda-graph (what nox -s integration passes there,
# fp4graph.integration.flags.piecewise_flags); 0.5.9 has no such field (the field is
# dropped there) and takes --enable-piecewise-cuda-graph like every family.
ROWS.update(
    (name, _row(f, server_args={"enforce_piecewise_cuda_graph": True})) for name, f in FAMILIES.items() if f.nsa
)
# --disable-shared-experts-fusion: DeepSeek routing through flashinfer's
# fused_topk_deepseek instead of sgl_kernel's moe_fused_gate.
ROWS["deepseek-v3-no-fusion"] = _row(
    FAMILIES["deepseek-v3"],
    server_args={"disable_shared_experts_fusion": True},
    expect={"num_fused_shared_experts": 0},
)



def row(name: str, tp: int = 1) -> dict[str, Any]:
    """The family ``name`` as a JSON-able dict (``name`` included), sized so that every
    tensor-parallel shard of ``tp`` ranks is one sglang takes: the test size's
    DeepSeek-style experts (64) do not split 2 ways (:data:`MOE_ROWS_ALIGNMENT`), so a
    tensor-parallel row widens them."""
    out = {"name": name, **copy.deepcopy(ROWS[name])}
    config = out["config"]
    if tp > 1 and "moe_intermediate_size" in config:
        per_rank = -(-MOE_ROWS_ALIGNMENT // 2)  # rows of w13 = 2 x per-rank intermediate
        config["moe_intermediate_size"] = max(config["moe_intermediate_size"], per_rank * tp)
    return out


def names(kind: str | None = None) -> list[str]:
    return [n for n, r in ROWS.items() if kind is None or r["kind"] == kind]


# The sglang series whose NSA models run piecewise (the PR #23351 backport); the others
# (0.5.8.x: ``nsa-piecewise-off``) keep piecewise off for them (tests/sglang checks that).
NSA_PIECEWISE = versions_with_topic("sglang", "nsa-piecewise-cuda-graph")


def runs_on(name: str, sglang: str) -> bool:
    """Whether row ``name`` is simulated on sglang ``sglang``: the release has its model
    class (``Family.min_sglang``), and an NSA row only where the series runs NSA piecewise."""
    family = by_architecture(ROWS[name]["architecture"])
    if family is not None and not family.in_sglang(sglang):
        return False
    return name not in NSA_FAMILIES or sglang in NSA_PIECEWISE
