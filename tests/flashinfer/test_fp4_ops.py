"""FlashInfer fp4 entry points under torch.compile(fullgraph=True), simulated on CPU.

Every test runs in child interpreters (``fi_child.py``) against the pristine and the
patched tree of each flashinfer-python version that has a series, on a simulated
SM120 (RTX PRO 6000 Blackwell) and SM100 (B200).  One child runs every case of a
(version, device, tree, mode): importing flashinfer and warming Dynamo up is most
of a child's cost.

What is checked, and how:

- trace: every public fp4 entry point and layout is compiled with
  ``torch.compile(fullgraph=True, backend="eager")`` on fake CUDA tensors, with
  ``dynamic=False`` and ``dynamic=True``; ``torch._dynamo.explain`` reports 0 graph
  breaks and one graph holding the ``flashinfer::<name>`` op; the compiled
  outputs' shapes/dtypes/strides equal what the op's fake returns.  The pristine
  tree fails the same trace with ``torch._dynamo.exc.Unsupported``.
- eager (fake vs real): the public function's eager path -- the code users run,
  unchanged by the series -- is executed under FakeTensorMode with only the JIT
  build/load stubbed (the C++ kernels of these versions fill outputs that the
  Python wrapper allocates, so the Python wrapper *is* the shape logic).  Its output
  metadata must equal the op's fake, including errors (0.6.3's scale-factor
  reshape raises when the padded size is not divisible by K / sf_vec_size), and
  must equal the pristine tree's eager output (eager behaviour unchanged).
- export: ``torch.export.export`` strict (Dynamo) and non-strict (the Python runs as
  written) of one case per entry point holds that entry point's op.
- opcheck: ``torch.library.opcheck`` on CPU tensors, with a CPU kernel registered
  only in the child (the op's real implementation with the module stubbed, outputs
  zeroed): schema (no undeclared mutation/aliasing), autograd registration,
  fake tensor vs the real Python wrapper, AOT dispatch with dynamic shapes.  Not
  checked on CPU: kernel numerics (GPU tests).
- warmup: ``flashinfer.fp4_warmup`` resolves every fp4 module for the device (the
  nvcc/ninja build and the dlopen are stubbed), ``modules=[kind]`` exactly the
  modules of that kind; reaching a module getter while Dynamo traces raises the
  RuntimeError that names the module and the ``fp4_warmup(modules=[...])`` call
  that builds it.
- cudnn plans: the cuDNN fp4 requirement check (every ``mm_fp4(backend="auto")`` call,
  sglang's default) keys its plan cache on ``alpha is not None``, not on each layer's
  alpha tensor (flashinfer#2450; the plan builder, cuDNN graph construction, is recorded
  instead of run).
- cold: the first fp4 call of a fresh process that skipped the warm-up (empty JIT
  cache, FLASHINFER_NVCC_VERSION unset, nvcc present or absent), inside a simulated
  CUDA graph capture (eager and compiled fullgraph) and while Dynamo traces, gets
  that same error, not one about the ``nvcc --version`` step (``+fp4graph.2`` named
  the step: tests/gpu on the H200).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from harness.child import opcheck_failures, run_child_main
from harness.targets import ci_versions, full_matrix, versions_with_topic

PROJECT = "flashinfer-python"
# Every series that makes the fp4 entry points ops (0.6.11.post1's is the CUDA-version fix alone).
VERSIONS = versions_with_topic(PROJECT, "fp4-quantize-ops")
# Every version: the trace (pristine fails, patched passes), the import, the warm-up, the
# arch choice and the cuDNN plans. The export, logging, fake-vs-eager, opcheck and
# cold-start checks: every version in nox -s tracing, the seed stack's and the newest in CI.
SAMPLED_VERSIONS = ci_versions(VERSIONS)
# The simulated GPUs: CI checks SM120 (what sglang's SM120 path calls); nox -s tracing adds
# SM100, whose fp4 path the series must not break for FlashInfer's other users.
GPUS = ["sm120", "sm100"] if full_matrix() else ["sm120"]

# Entry points each version offers (cases for others are skipped with a reason).
ENTRY_POINTS = {
    "fp4_quantize",
    "nvfp4_quantize",
    "mxfp4_quantize",
    "block_scale_interleave",
    "nvfp4_batched_quantize",
    "scaled_fp4_grouped_quantize",
    "silu_and_mul_scaled_nvfp4_experts_quantize",
    "mm_fp4",
}
# Eager cases that cannot run on this machine, with the reason.
EAGER_UNRUNNABLE = {
    "mm_fp4-cudnn": "cuDNN (nvidia-cudnn-frontend) is not installed for the CPU suite",
    "mm_fp4-auto": "backend='auto' probes cuDNN, not installed for the CPU suite",
    "nvfp4_quantize-shuffle": "the shuffle row indices are built on the real CUDA device",
    "mm_fp4-cute-dsl": "the CuTe-DSL backend needs nvidia-cutlass-dsl, not installed for the CPU suite",
}

CALLS_DOT_CUDA = {"nvfp4_quantize", "mxfp4_quantize"}
OPCHECK_UNRUNNABLE = {
    **EAGER_UNRUNNABLE,
}


def unrunnable(version: str, name: str) -> str | None:
    """Why the eager case ``name`` cannot run on this machine for ``version``, if it cannot."""
    if name in EAGER_UNRUNNABLE:
        return EAGER_UNRUNNABLE[name]
    return None


def _run(tree: pathlib.Path, request: dict[str, Any]) -> dict[str, Any]:
    return run_child_main("fi_child", request, tree=tree, loglevel=request.get("loglevel", "0"))


_cache: dict[tuple, dict[str, Any]] = {}


@pytest.fixture(scope="session")
def child(wheel_tree, tmp_path_factory):
    def get(version: str, gpu: str, patched: bool, mode: str, **extra: Any) -> dict[str, Any]:
        key = (version, gpu, patched, mode, json.dumps(extra, sort_keys=True))
        if key not in _cache:
            tree = wheel_tree(PROJECT, version, patched=patched)
            req = {
                "gpu": gpu,
                "mode": mode,
                "version": version,
                "patched": patched,
                "dynamic": [False, True],
                "tmp": str(tmp_path_factory.mktemp("fi-jit")),
                **extra,
            }
            _cache[key] = _run(tree, req)
        return _cache[key]

    return get


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("version", VERSIONS)
def test_patched_traces_fullgraph_without_breaks(child, version: str, gpu: str) -> None:
    cases = child(version, gpu, True, "trace")["cases"]
    assert cases
    failures = {k: v for k, v in cases.items() if not v.get("ok")}
    assert not failures, json.dumps(failures, indent=1)[:4000]
    for key, rec in cases.items():
        assert rec["graph_breaks"] == 0, key
        assert rec["graphs"] == 1, key
        entry = rec["entry"]
        assert rec["ops"] and all(op.startswith(f"flashinfer.{entry}") for op in rec["ops"]), (
            key,
            rec["ops"],
        )
        assert rec["meta"] == rec["fake_meta"], (key, rec["meta"], rec["fake_meta"])
    entries = {rec["entry"] for rec in cases.values()}
    assert entries == ENTRY_POINTS


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("version", VERSIONS)
def test_pristine_fails_the_same_trace(child, version: str, gpu: str) -> None:
    cases = child(version, gpu, False, "trace", dynamic=[False])["cases"]
    passed = [k for k, v in cases.items() if v.get("ok")]
    assert not passed, f"pristine {version} traced: {passed}"
    for key, rec in cases.items():
        allowed = {"torch._dynamo.exc.Unsupported"}
        if rec["entry"] in CALLS_DOT_CUDA:
            # Pristine nvfp4_quantize / mxfp4_quantize call .cuda() first; a CPU
            # build of torch rejects that during fake propagation, before Dynamo
            # reaches the module getter (on a CUDA build: Unsupported).
            allowed.add("torch._dynamo.exc.TorchRuntimeError")
        assert rec["error_type"] in allowed, (key, rec)


# One case per entry point (and layout family): torch.export is the slower check.
EXPORT_CASES = [
    "fp4_quantize-128x4-sf16",
    "fp4_quantize-colmajor",
    "nvfp4_quantize-8x4",
    "mxfp4_quantize",
    "block_scale_interleave-3d",
    "nvfp4_block_scale_interleave",
    "nvfp4_batched_quantize",
    "scaled_fp4_grouped_quantize",
    "silu_and_mul_scaled_nvfp4_experts_quantize",
    "mm_fp4-cutlass",
    "mm_fp4-auto",
]


@pytest.mark.parametrize("version", SAMPLED_VERSIONS)
def test_patched_exports_strict_and_non_strict(child, version: str) -> None:
    """torch.export as well as torch.compile: strict export traces with Dynamo (the
    substituted twin), non-strict export runs the Python as written (the public function's
    is_exporting() test); both graphs hold the entry point's flashinfer op."""
    cases = child(version, "sm120", True, "export", only=EXPORT_CASES)["cases"]
    assert len(cases) == 2 * len(EXPORT_CASES), sorted(cases)
    failures = {k: v for k, v in cases.items() if not v.get("ok")}
    assert not failures, json.dumps(failures, indent=1)[:4000]
    for key, rec in cases.items():
        assert rec["ops"] == [rec["entry"]], (key, rec["ops"])


@pytest.mark.parametrize("version", SAMPLED_VERSIONS)
def test_trace_with_api_logging(child, version: str) -> None:
    """FLASHINFER_LOGLEVEL >= 1 wraps every API in a logger (datetime.now())."""
    for level in ("1", "3"):
        cases = child(
            version,
            "sm120",
            True,
            "trace",
            loglevel=level,
            dynamic=[False],
            only=["fp4_quantize-128x4-sf16", "mm_fp4-cutlass"],
        )["cases"]
        assert cases and all(v.get("ok") and v["graph_breaks"] == 0 for v in cases.values()), cases


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("version", SAMPLED_VERSIONS)
def test_fake_equals_eager_shape_logic(child, version: str, gpu: str) -> None:
    patched = child(version, gpu, True, "eager")["cases"]
    pristine = child(version, gpu, False, "eager")["cases"]
    checked = 0
    for name, rec in patched.items():
        if unrunnable(version, name):
            continue
        if "eager_error" in rec:
            # The fake must fail the same way the version's eager code does.
            assert rec.get("fake_error") == rec["eager_error"], (name, rec)
        else:
            assert rec["eager"] == rec["fake"], (name, rec)
        # Eager behaviour is unchanged by the series.
        assert rec.get("eager") == pristine[name].get("eager"), (name, rec, pristine[name])
        assert rec.get("eager_error") == pristine[name].get("eager_error"), name
        checked += 1
    assert checked >= 25


@pytest.mark.parametrize("version", SAMPLED_VERSIONS)
def test_opcheck(child, version: str) -> None:
    cases = child(version, "sm120", True, "opcheck")["cases"]
    skip = {name for name in cases if name in OPCHECK_UNRUNNABLE or unrunnable(version, name)}
    bad = opcheck_failures(cases, skip)
    assert not bad, json.dumps(bad, indent=1)[:4000]


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("version", VERSIONS)
def test_warmup_and_clear_jit_error(child, version: str, gpu: str) -> None:
    data = child(version, gpu, True, "warmup")
    warm = data["warmup"]
    names = warm["names"]
    assert names == warm["built"], warm
    arch = "120" if gpu == "sm120" else "100"
    # The children build with nvcc 12.9 (FLASHINFER_NVCC_VERSION); versions
    # with an SM12x family module (0.6.7+) pick fp4_quantization_120f there.
    fp4_module = f"fp4_quantization_{arch}"
    if gpu == "sm120" and data["arch"]["nvcc=12.9"].get("module") == ["fp4_quantization_120f"]:
        fp4_module = "fp4_quantization_120f"
    assert fp4_module in names, names
    assert any(n.startswith("fp4_gemm_cutlass") for n in names)
    assert any(n.startswith("fused_moe") for n in names)
    # A second warm-up loads nothing new and reports the cached getters.
    assert len(warm["again"]) == len(names)
    err = data["jit_error"]
    advice = "flashinfer.fp4_warmup(device, modules=['quantization'])"
    assert err["flag_module"] in (f"fp4_quantization_{arch}", fp4_module), err
    assert advice in err["flag"], err["flag"]
    # nvcc 12.8 given: the trace reaches the module's spec; unset: nvcc --version first.
    traced = err["traced-nvcc=12.8"]
    assert traced["module"] == f"fp4_quantization_{arch}", traced
    assert advice in traced["message"], traced
    assert "building it first does not help" in traced["message"], traced
    # Unset: the getter refuses first, before it reads the nvcc version.
    unset = err["traced-nvcc=None"]
    assert unset["module"] == f"fp4_quantization_{arch}", unset
    assert advice in unset["message"] and "nvcc --version" not in unset["message"], unset


@pytest.mark.parametrize("version", SAMPLED_VERSIONS)
def test_first_fp4_call_in_capture_or_trace_names_the_module(child, version: str) -> None:
    """tests/gpu's capture without warm-up, and its compiled and traced forms: the
    error names the fp4 module and its fp4_warmup call; nvcc runs during capture (it
    makes no CUDA call) but never while tracing, and no build starts."""
    cold = child(version, "sm120", True, "cold")["cold"]
    advice = "flashinfer.fp4_warmup(device, modules=['quantization'])"
    for toolkit in ("nvcc", "no-nvcc"):
        for step in ("capture", "compiled-capture", "trace"):
            rec = cold[toolkit][step]
            where = (toolkit, step, rec["error"])
            assert (rec["module"] or "").startswith("fp4_quantization_120"), where
            assert advice in rec["message"], where
            assert "nvcc --version" not in rec["message"], where
            assert rec["built"] == [], where
            assert len(rec["nvcc_runs"]) == (0 if step == "trace" else 1), (where, rec["nvcc_runs"])
    # nvcc 12.9 present: the SM12x family module (0.6.7+); absent: torch's CUDA 12.8.
    assert cold["no-nvcc"]["capture"]["module"] == "fp4_quantization_120"
    assert cold["nvcc"]["capture"]["module"] in ("fp4_quantization_120", "fp4_quantization_120f")


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("version", VERSIONS)
def test_warmup_builds_the_selected_kinds_only(child, version: str, gpu: str) -> None:
    data = child(version, gpu, True, "warmup")
    select, everything = data["select"], data["warmup"]["names"]
    available = {kind: rec for kind, rec in select.items() if "names" in rec}
    # trtllm kinds exist on SM10x only; elsewhere asking for them is an error.
    expected = set(select) if gpu == "sm100" else set(select) - {"gemm_trtllm", "moe_trtllm"}
    assert set(available) == expected, select
    for kind, rec in select.items():
        if kind not in available:
            assert rec["error"].startswith("ValueError") and "no module on SM" in rec["error"], rec
            continue
        # One module per kind, built from cold, named by the guard as that kind.
        assert rec["names"] == rec["built"] and len(rec["built"]) == 1, (kind, rec)
        assert rec["kinds"] == [kind], (kind, rec)
    # Together, the kinds are exactly what the no-argument warm-up builds.
    assert sorted(n for rec in available.values() for n in rec["built"]) == sorted(everything)


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("version", VERSIONS)
def test_import_runs_no_subprocess(child, version: str, gpu: str) -> None:
    """`import flashinfer` must not run nvcc (nor `which nvcc`): 0.6.7+ resolve
    the SM12x arch suffix with is_cuda_version_at_least("12.9") at import."""
    # Only the toolkit matters here: apache-tvm-ffi builds its own DLPack addon at
    # import on CUDA builds of torch (the stacks' pins), which is not flashinfer's doing.
    patched = child(version, gpu, True, "import")["import_subprocesses"]
    assert [c for c in patched if "nvcc" in c] == [], patched
    pristine = child(version, gpu, False, "import")
    if gpu == "sm120" and pristine["arch_at_import"]:
        # Pristine 0.6.7+ runs nvcc at import on SM12x (CompilationContext).
        assert any("nvcc" in c for c in pristine["import_subprocesses"]), pristine


@pytest.mark.parametrize("version", VERSIONS)
def test_import_does_not_import_dynamo(child, version: str) -> None:
    """`import flashinfer` leaves torch._dynamo unimported (its import costs seconds in
    every eager process and worker); the patches import it only when something traces.
    Pristine, in the same child, neither."""
    for patched in (True, False):
        dynamo = child(version, "sm120", patched, "import")["dynamo"]
        assert dynamo == {"before": False, "after": False}, (patched, dynamo)


@pytest.mark.parametrize("version", VERSIONS)
def test_arch_choice_reads_nvcc(child, version: str) -> None:
    """The SM12x arch suffix, the fp4 module choice and the compile flags read one
    source, the nvcc version, whatever torch.version.cuda says (12.8 here)."""
    arch = child(version, "sm120", True, "warmup")["arch"]
    assert arch["torch_cuda"] == "12.8"
    at_129 = arch["nvcc=12.9"]
    if at_129.get("module") != ["fp4_quantization_120f"]:
        assert at_129.get("module") == ["fp4_quantization_120"], arch
        pytest.skip(f"{version} has no SM12x family (120f) fp4 module")
    assert at_129["target_archs"] == ["120f"], arch
    # nvcc 12.8 cannot build compute_120f: no 120f module, no 120f target.
    at_128 = arch["nvcc=12.8"]
    assert "120f" not in at_128["target_archs"], arch
    assert at_128.get("module") != ["fp4_quantization_120f"], arch


PLAN_KEY_BACKPORT = versions_with_topic(PROJECT, "cudnn-fp4-plan-key")


@pytest.mark.parametrize("version", VERSIONS)
def test_one_cudnn_fp4_plan_per_shape(child, version: str) -> None:
    """Two layers' alphas, one GEMM shape: one plan.  Pristine 0.6.1 keys the cache on the
    alpha tensor itself (a plan per layer and shape, and ``bool(alpha)``, a device read,
    on each miss); the backport (Topic: cudnn-fp4-plan-key) and 0.6.3+ key on the bool."""
    patched = child(version, "sm120", True, "cudnn-plans")["plans"]
    pristine = child(version, "sm120", False, "cudnn-plans")["plans"]
    if pristine.get("absent"):
        pytest.skip(f"flashinfer {version} has no create_cudnn_execution_plans_fp4_gemm (its cuDNN plans are built elsewhere)")
    assert patched == {"calls": 2, "cache_entries": 1, "key_types": ["bool"]}, patched
    if version in PLAN_KEY_BACKPORT:
        assert pristine["cache_entries"] == 2 and "bool" not in pristine["key_types"], pristine
    else:
        assert pristine == patched, f"flashinfer {version} keys on the bool itself: {pristine}"
