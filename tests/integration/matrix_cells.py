"""The stacks and cells the CPU integration checks run (shared by conftest and tests)."""

from __future__ import annotations

import pathlib
from typing import Any

from fp4graph.integration import flags, matrix
from fp4graph.model import stacks
from fp4graph.model.families import Family
from harness.targets import ci_stacks

REPO = pathlib.Path(__file__).resolve().parents[2]


def sglang_stacks() -> list[tuple[str, str, str]]:
    """(stack, sglang version, flashinfer version) of every sglang stack in stacks.toml."""
    catalog = stacks.load(REPO / "patches" / "stacks.toml")
    return [(stack.name, catalog.versions(stack)["sglang"], catalog.versions(stack)["flashinfer-python"])
            for stack in catalog.sglang_stacks()]


SGLANG_STACKS = sglang_stacks()
STACK_IDS = [name for name, _, _ in SGLANG_STACKS]
# The stacks whose release runs every cell through its ServerArgs and loader (a child of
# 90-190 s each): all in the full tier (nox -s tracing), the seed's and the newest in CI.
CHECKED_STACK_IDS = ci_stacks(STACK_IDS)


def load_combinations(version: str) -> list[matrix.Cell]:
    """One cell per family x MoE backend x fusion (start order and piecewise do not change
    what is loaded) of the families sglang ``version`` has."""
    return matrix.Selection(start_orders=[matrix.StartOrder.DEFAULT], sglang_version=version).cells()


def families(version: str) -> list[Family]:
    """The families sglang ``version`` has a model class for."""
    return matrix.Selection(sglang_version=version).available()


def requests(version: str, ckpts: dict[str, pathlib.Path]) -> list[dict[str, Any]]:
    cells: list[dict[str, Any]] = []
    for cell in matrix.Selection(sglang_version=version).cells():
        for mode in flags.Piecewise:
            argv = flags.server_args(
                sglang_version=version, model_path=ckpts[cell.family.name], cell=cell, mode=mode, tp=1, port=30000
            )
            cells.append({"id": f"{cell.id}/{mode.value}", "family": cell.family.name, "argv": argv, "load": False})
    for family in families(version):  # sglang's own default: no piecewise flag at all
        cells.append({"id": f"{family.name}/sglang-default", "family": family.name, "load": False,
                      "argv": ["--model-path", str(ckpts[family.name]), "--quantization", "modelopt_fp4"]})
    for cell in load_combinations(version):
        argv = flags.server_args(
            sglang_version=version, model_path=ckpts[cell.family.name], cell=cell, mode=flags.Piecewise.ON,
            tp=1, port=30000,
        )
        cells.append({"id": f"load:{cell.id}", "family": cell.family.name, "argv": argv, "load": True})
    return cells + speculative_requests(version, ckpts)


# Speculative decoding with the models' own MTP layer (issue 19): what each release
# decides for piecewise with it.  NEXTN is how DeepSeek / GLM MTP is asked for (sglang
# turns it into EAGLE); the draft shape is fixed so that ServerArgs picks nothing by GPU.
SPECULATIVE_FAMILIES = ("glm5", "deepseek-v3")
SPECULATIVE_ARGS = ("--speculative-algorithm", "NEXTN", "--speculative-num-steps", "1",
                    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2")


def speculative_requests(version: str, ckpts: dict[str, pathlib.Path]) -> list[dict[str, Any]]:
    """The seed's start order with MTP, piecewise off and on, for the families that have it."""
    cells: list[dict[str, Any]] = []
    for family in families(version):
        if family.name not in SPECULATIVE_FAMILIES:
            continue
        cell = matrix.Cell(family=family, start_order=matrix.StartOrder.NO_CUDA_GRAPH, moe_backend="auto",
                           fusion=matrix.Fusion.ON)
        for mode in flags.Piecewise:
            argv = flags.server_args(sglang_version=version, model_path=ckpts[family.name], cell=cell, mode=mode,
                                     tp=1, port=30000, extra=SPECULATIVE_ARGS)
            cells.append({"id": f"spec:{family.name}/{mode.value}", "family": family.name, "argv": argv,
                          "load": False, "speculative": True})
    return cells


def stack_versions(stack: str) -> tuple[str, str]:
    """(sglang version, flashinfer version) of ``stack``."""
    _, sglang, flashinfer = next(s for s in SGLANG_STACKS if s[0] == stack)
    return sglang, flashinfer
