"""FlashInfer fp4 fused-MoE entry points under torch.compile(fullgraph=True), on CPU.

``cutlass_fused_moe`` (simulated SM120 and SM100) and ``trtllm_fp4_block_scale_moe`` /
``trtllm_fp4_block_scale_routed_moe`` (simulated SM100; SM100-only kernels) of every
flashinfer-python version whose series carries the fused-MoE patch, run in child
interpreters (``moe_child.py``, built on ``fi_child.py``) against the pristine and
the patched tree.  One child per (version, device, tree) runs several checks:
importing flashinfer and warming Dynamo up is most of a child's cost.

- trace: each case is compiled with ``torch.compile(fullgraph=True)`` on fake CUDA
  tensors, ``dynamic=False`` and ``dynamic=True``: one graph holding the
  ``flashinfer::<entry>[_out]`` op, 0 graph breaks by ``torch._dynamo.explain``,
  compiled outputs' metadata equal to the op's fake, and the caller's ``output=``
  tensor returned in the same list positions as eagerly.  The pristine tree fails
  the same trace with ``torch._dynamo.exc.Unsupported``.  On torch < 2.10 the
  unfinalized trtllm ops (an output size known only at run time) also need
  ``torch._dynamo.config.capture_dynamic_output_shape_ops = True``: without it they
  fail with Dynamo's "Dynamic shape operator", which the child records.
- eager (fake vs real): the public function's eager path, with the JIT build/load
  stubbed (and the trtllm kernel's returned tensors allocated as its C++ launcher
  does), under FakeTensorMode; its output metadata (or error) must equal the op's
  fake, and equal the pristine tree's eager output (eager behaviour unchanged).  A
  size the real op only knows at run time (the trtllm ``gemm2_output`` rows, padded
  to the tile of the config the autotuner picks) is an unbacked size in the fake and
  matches any size.
- opcheck: ``torch.library.opcheck`` of every op on CPU tensors (a CPU kernel
  registered in the child runs the real implementation, kernels stubbed).
- forward: each op's real implementation calls the public function with exactly
  the arguments the caller gave it (the enum/None conversions round-trip).
"""

from __future__ import annotations

import json
import pathlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from harness.child import opcheck_failures, run_child_main
from harness.targets import ci_versions, versions_with_topic

PROJECT = "flashinfer-python"


# Versions whose series carries the fused-MoE topic, in the 0.6.x API moe_child speaks
# (0.7.x: test_fused_moe_074.py).
VERSIONS = versions_with_topic(PROJECT, "trtllm-moe-ops", below="0.7")
# SM120 (cutlass, what sglang's SM120 MoE path may call) on every version; SM100 (the trtllm
# entry points too, FlashInfer's other users) on every version in nox -s tracing and on the
# seed stack's and the newest in CI (harness.targets.ci_versions).
SM100_VERSIONS = ci_versions(VERSIONS)
VERSION_GPUS = [(v, gpu) for v in VERSIONS for gpu in ("sm120", "sm100") if gpu == "sm120" or v in SM100_VERSIONS]

CUTLASS = {"cutlass_fused_moe"}
TRTLLM = {"trtllm_fp4_block_scale_moe", "trtllm_fp4_block_scale_routed_moe"}
CUTLASS_OPS = {"cutlass_fused_moe", "cutlass_fused_moe_out"}
ALL_OPS = CUTLASS_OPS | {
    f"{entry}{suffix}" for entry in TRTLLM for suffix in ("", "_out", "_unfinalized")
}

# (gpu, patched) -> what the child runs.  SM100 covers both entry-point families;
# on SM120 only cutlass exists.  Pristine trees: the trace must fail, and eager
# must equal the patched tree's eager.
CHILDREN: dict[tuple[str, bool], dict[str, Any]] = {
    ("sm120", True): {"modes": ["trace", "eager"], "dynamic": [False, True]},
    ("sm100", True): {
        "modes": ["trace", "eager", "opcheck", "forward"],
        "dynamic": [False, True],
    },
    ("sm120", False): {"modes": ["trace"], "dynamic": [False]},
    ("sm100", False): {"modes": ["trace", "eager"], "dynamic": [False]},
}


def _run(tree: pathlib.Path, request: dict[str, Any]) -> dict[str, Any]:
    return run_child_main("moe_child", request, tree=tree)


@pytest.fixture(scope="session")
def moe_results(wheel_tree, tmp_path_factory) -> dict[tuple[str, str, bool], dict[str, Any]]:
    """Every child of every version, two at a time (each is one CPU-bound process)."""
    jobs = []
    for version in VERSIONS:
        for (gpu, patched), spec in CHILDREN.items():
            if (version, gpu) not in VERSION_GPUS:
                continue
            tree = wheel_tree(PROJECT, version, patched=patched)
            req = {
                "gpu": gpu,
                "version": version,
                "patched": patched,
                "tmp": str(tmp_path_factory.mktemp("fi-moe-jit")),
                **spec,
            }
            jobs.append(((version, gpu, patched), tree, req))
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {key: pool.submit(_run, tree, req) for key, tree, req in jobs}
        return {key: f.result() for key, f in futures.items()}


def _matches(real: Any, fake: Any) -> bool:
    if fake == "?":  # a size only known at run time
        return isinstance(real, int)
    if isinstance(real, list) and isinstance(fake, list):
        return len(real) == len(fake) and all(map(_matches, real, fake))
    return real == fake


@pytest.mark.parametrize(("version", "gpu"), VERSION_GPUS)
def test_patched_traces_fullgraph_to_one_op(moe_results, version: str, gpu: str) -> None:
    cases = moe_results[(version, gpu, True)]["trace"]
    failures = {k: v for k, v in cases.items() if not v.get("ok")}
    assert not failures, json.dumps(failures, indent=1)[:4000]
    for key, rec in cases.items():
        assert rec["graph_breaks"] == 0 and rec["explain_graphs"] == 1, (key, rec)
        assert rec["graphs"] == 1, (key, rec)
        entry = rec["entry"]
        assert len(rec["ops"]) == 1 and rec["ops"][0].startswith(f"flashinfer.{entry}"), (key, rec)
        assert rec["meta"] == rec["fake_meta"], (key, rec["meta"], rec["fake_meta"])
    entries = {rec["entry"] for rec in cases.values()}
    assert entries == (CUTLASS | TRTLLM if gpu == "sm100" else CUTLASS)
    ops = {op.split(".", 1)[1] for rec in cases.values() for op in rec["ops"]}
    assert ops == (ALL_OPS if gpu == "sm100" else CUTLASS_OPS)
    assert any(k.endswith("dynamic=True") for k in cases)


def _torch_before(data: dict[str, Any], version: tuple[int, int]) -> bool:
    major_minor = tuple(int(p) for p in data["torch"].split("+")[0].split(".")[:2])
    return major_minor < version


@pytest.mark.parametrize(("version", "gpu"), VERSION_GPUS)
def test_unfinalized_needs_capture_dynamic_output_shape_ops_before_torch_2_10(
    moe_results, version: str, gpu: str
) -> None:
    """The unfinalized trtllm ops return gemm2_output with a row count known only at
    run time (an unbacked size).  torch >= 2.10 captures it under fullgraph=True;
    on older torch Dynamo refuses it unless the caller sets
    torch._dynamo.config.capture_dynamic_output_shape_ops = True: the child then
    records the error and traces again with it set (test_patched_traces_...)."""
    data = moe_results[(version, gpu, True)]
    cases = data["trace"]
    unfinalized = {
        k
        for k, rec in cases.items()
        if any(op.endswith("_unfinalized") for op in rec.get("ops", ()))
    }
    needed = {k for k, rec in cases.items() if "needed_capture_dynamic_output_shape_ops" in rec}
    if not _torch_before(data, (2, 10)):
        assert not needed, needed
        return
    assert needed == unfinalized, (needed, unfinalized)
    assert bool(unfinalized) == (gpu == "sm100")
    for key in needed:
        error = cases[key]["needed_capture_dynamic_output_shape_ops"]
        assert error.startswith("torch._dynamo.exc.Unsupported: Dynamic shape operator"), (
            key,
            error,
        )
        assert "trtllm_fp4_block_scale_" in error and "_unfinalized" in error, (key, error)


@pytest.mark.parametrize(("version", "gpu"), VERSION_GPUS)
def test_pristine_fails_the_same_trace(moe_results, version: str, gpu: str) -> None:
    cases = moe_results[(version, gpu, False)]["trace"]
    assert cases
    for key, rec in cases.items():
        assert not rec.get("ok"), f"pristine {version} traced {key}"
        assert rec["error_type"] == "torch._dynamo.exc.Unsupported", (key, rec)
    entries = {rec["entry"] for rec in cases.values()}
    assert entries == (CUTLASS | TRTLLM if gpu == "sm100" else CUTLASS)


@pytest.mark.parametrize(("version", "gpu"), VERSION_GPUS)
def test_fake_equals_eager(moe_results, version: str, gpu: str) -> None:
    cases = moe_results[(version, gpu, True)]["eager"]
    traced = moe_results[(version, gpu, True)]["trace"]
    errors = 0
    for name, rec in cases.items():
        if "eager_error" in rec:
            # The fake fails the same way the version's eager code does.
            assert rec.get("fake_error") == rec["eager_error"], (name, rec)
            errors += 1
            continue
        assert "fake" in rec, (name, rec)
        assert _matches(rec["eager"], rec["fake"]), (name, rec)
        # The caller's output= tensor comes back where eager puts it.
        for key, t in traced.items():
            if key.split("|")[0] == name:
                assert t["returned_inputs"] == rec["returned_inputs"], (key, t, rec)
    assert errors >= 3 and len(cases) - errors >= (15 if gpu == "sm100" else 5)


@pytest.mark.parametrize("version", SM100_VERSIONS)
def test_eager_unchanged(moe_results, version: str) -> None:
    patched = moe_results[(version, "sm100", True)]["eager"]
    pristine = moe_results[(version, "sm100", False)]["eager"]
    assert patched.keys() == pristine.keys()
    for name, rec in patched.items():
        for field in ("eager", "eager_error", "returned_inputs"):
            assert rec.get(field) == pristine[name].get(field), (name, field, rec, pristine[name])


@pytest.mark.parametrize("version", SM100_VERSIONS)
def test_opcheck(moe_results, version: str) -> None:
    cases = moe_results[(version, "sm100", True)]["opcheck"]
    bad = opcheck_failures(cases)
    assert not bad, json.dumps(bad, indent=1)[:4000]
    assert {rec["op"] for rec in cases.values()} == ALL_OPS


@pytest.mark.parametrize("version", SM100_VERSIONS)
def test_real_implementation_forwards_every_argument(moe_results, version: str) -> None:
    cases = moe_results[(version, "sm100", True)]["forward"]
    assert len(cases) >= 15
    bad = {name: rec["diff"] for name, rec in cases.items() if rec["diff"]}
    assert not bad, bad
    assert {rec["op"].split("::")[1] for rec in cases.values()} == ALL_OPS
