"""flashinfer-python 0.7.4 fp4 fused-MoE entry points under torch.compile(fullgraph=True).

``trtllm_fp4_block_scale_moe``, ``trtllm_fp4_block_scale_routed_moe`` (packed ids, and
an ``(ids, weights)`` tuple) and ``cutlass_fused_moe``, on a simulated SM100, in child
interpreters (``moe074_child.py``) against the pristine and the patched tree:

- trace: every case compiles with fullgraph=True, dynamic=False and True, to one graph
  holding exactly the entry point's op, 0 graph breaks; compiled outputs' metadata
  equal the op's fake, and the caller's tensors (output=, routing weights) come back
  in the positions eager returns them.  The pristine tree fails each trace with
  ``torch._dynamo.exc.Unsupported``.
- eager: the public function run eagerly with the C++ launcher modelled (from
  csrc/trtllm_fused_moe_kernel_launcher.cu) equals the op's fake, error cases
  included, and equals the pristine tree's eager run (eager path unchanged).
- opcheck: every op passes ``torch.library.opcheck`` (schema, fake, AOT dispatch:
  an op that mutates an input and returns a list fails there, as 0.7.4's first
  cutlass ops did).
"""

from __future__ import annotations

import json
import pathlib
import tempfile
from typing import Any

import pytest

from harness.child import opcheck_failures, run_child_main
from harness.targets import versions_with_topic

PROJECT = "flashinfer-python"
# Versions whose series carries the fused-MoE topics, in the 0.7.x API moe074_child speaks.
VERSIONS = versions_with_topic(PROJECT, "trtllm-moe-ops", at_least="0.7")
TRTLLM = {"trtllm_fp4_block_scale_moe", "trtllm_fp4_block_scale_routed_moe"}
OPS = TRTLLM | {"cutlass_fused_moe", "cutlass_fused_moe_out"}


def _child(tree: pathlib.Path, patched: bool, modes: list[str]) -> dict[str, Any]:
    request = {"patched": patched, "modes": modes, "dynamic": [False, True],
               "tmp": tempfile.mkdtemp(prefix="fi-moe074-")}  # fmt: skip
    return run_child_main("moe074_child", request, tree=tree)


@pytest.fixture(scope="module", params=VERSIONS)
def version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def patched(wheel_tree, version) -> dict[str, Any]:
    return _child(wheel_tree(PROJECT, version, patched=True), True, ["trace", "eager", "opcheck"])


@pytest.fixture(scope="module")
def pristine(wheel_tree, version) -> dict[str, Any]:
    return _child(wheel_tree(PROJECT, version, patched=False), False, ["trace", "eager"])


def _matches(real: Any, fake: Any) -> bool:
    if fake == "?":  # a size only known at run time (the unfinalized FC2 rows)
        return isinstance(real, int)
    if isinstance(real, list) and isinstance(fake, list):
        return len(real) == len(fake) and all(map(_matches, real, fake))
    return real == fake


def test_patched_traces_fullgraph_to_one_op(patched) -> None:
    cases = patched["trace"]
    assert len(cases) == 2 * 15
    failures = {k: v for k, v in cases.items() if not v["ok"]}
    assert not failures, json.dumps(failures, indent=1)[:4000]
    for key, rec in cases.items():
        assert rec["graph_breaks"] == 0 and rec["graphs"] == 1, (key, rec)
        entry = rec["entry"]
        assert len(rec["ops"]) == 1 and rec["ops"][0].startswith(f"flashinfer.{entry}"), (key, rec)
        assert rec["meta"] == rec["fake_meta"], (key, rec["meta"], rec["fake_meta"])
    assert {rec["entry"] for rec in cases.values()} == TRTLLM | {"cutlass_fused_moe"}
    # The caller's tensors come back as themselves, as eagerly.
    returned = {k.split("|")[0]: rec["returned_inputs"] for k, rec in cases.items()}
    assert returned["trtllm-nvfp4-out"] == [0] and returned["routed-unpacked-out"] == [0]
    assert returned["routed-unpacked-unfinalized"] == [1]
    assert returned["routed-unpacked-lora-unfinalized"] == [1]
    assert returned["cutlass-nvfp4-out"] == [0] and returned["trtllm-nvfp4"] == []


def test_unfinalized_output_rows_are_a_run_time_size(patched) -> None:
    rec = patched["trace"]["trtllm-nvfp4-unfinalized|dynamic=False"]
    # [gemm2_output, expert_weights, expanded_idx_to_permuted_idx]
    gemm2, weights, expanded = rec["meta"][1]
    assert gemm2[:2] == [["?", 512], "torch.bfloat16"]
    assert weights[:2] == [[40, 4], "torch.bfloat16"]
    assert expanded[:2] == [[160], "torch.int32"]


def test_pristine_fails_the_same_trace(pristine) -> None:
    cases = pristine["trace"]
    assert len(cases) == 2 * 15
    for key, rec in cases.items():
        assert not rec["ok"], f"pristine traced {key}"
        assert rec["error_type"] == "torch._dynamo.exc.Unsupported", (key, rec)


def test_fake_equals_eager(patched) -> None:
    cases = patched["eager"]
    errors = 0
    for name, rec in cases.items():
        if "eager_error" in rec:
            assert name.endswith("!"), (name, rec)
            # The fake fails the way this version's eager code does.
            assert rec.get("fake_error") == rec["eager_error"], (name, rec)
            errors += 1
            continue
        assert _matches(rec["eager"], rec["fake"]), (name, rec)
        assert rec["returned_inputs"] == rec["fake_returned_inputs"], (name, rec)
    assert errors == 3 and len(cases) == 18


def test_eager_unchanged(patched, pristine) -> None:
    assert patched["eager"].keys() == pristine["eager"].keys()
    for name, rec in patched["eager"].items():
        for field in ("eager", "eager_error", "returned_inputs"):
            assert rec.get(field) == pristine["eager"][name].get(field), (name, field)


def test_opcheck(patched) -> None:
    cases = patched["opcheck"]
    bad = opcheck_failures(cases)
    assert not bad, json.dumps(bad, indent=1)[:4000]
    assert {rec["op"] for rec in cases.values()} == OPS
    assert len(cases) == 15
