"""The piecewise warm-up builds the FlashInfer fp4 modules the model uses, and no others.

sglang's ``PiecewiseCudaGraphRunner`` (patched) builds FlashInfer's fp4 JIT modules
before torch.compile traces the model.  The goal: a patched server's first start
compiles no module that the pristine server with piecewise CUDA graph off would not
compile for the same model.  Per sglang stack and model kind, on a simulated SM120
(tests/sglang/warmup_sim.py, which lists its stand-ins):

* what the patched warm-up requests (``flashinfer_fp4_modules``) and the JIT modules
  it builds through ``flashinfer.fp4_warmup(device, modules=...)``;
* the JIT modules the eager forward of the same layers builds with pristine sglang
  and pristine flashinfer (piecewise off), recorded at FlashInfer's JIT build.

Model kinds: dense (ModelOpt NVFP4 linear layers), MoE with sglang's default MoE
runner (``auto``: sgl_kernel's CUTLASS fp4 MoE) and MoE with
``--moe-runner-backend flashinfer_cutlass`` (FlashInfer's CUTLASS fused MoE).
"""

from __future__ import annotations

import json
import pathlib
import textwrap
from typing import Any

import pytest

from support.child import run_python, tail

HERE = pathlib.Path(__file__).resolve().parent
FLASHINFER_TESTS = HERE.parent / "flashinfer"

# sglang version -> the flashinfer-python it pins.
TARGETS = {"0.5.9": "0.6.3", "0.5.10.post1": "0.6.7.post3", "0.5.11": "0.6.8.post1"}
KINDS = [
    {"name": "dense", "moe": False, "moe_runner_backend": "auto"},
    {"name": "moe-auto", "moe": True, "moe_runner_backend": "auto"},
    {"name": "moe-flashinfer_cutlass", "moe": True, "moe_runner_backend": "flashinfer_cutlass"},
]
# The SM120 fp4 quantization module: 0.6.7+ build the SM12x family variant (nvcc >= 12.9).
QUANT = {"0.6.3": "fp4_quantization_120"}
# What the model kinds need on SM120, per sglang release (read from its fp4 GEMM and
# MoE backend selection): 0.5.9's --fp4-gemm-backend defaults to flashinfer_cutlass;
# 0.5.10+ default to "auto", which initialize_fp4_gemm_config resolves to
# flashinfer_cudnn on SM120 (cuDNN: no JIT module).
EXPECTED_KINDS = {
    "0.5.9": {
        "dense": ["gemm_cutlass", "quantization"],
        "moe-auto": ["gemm_cutlass", "quantization"],
        "moe-flashinfer_cutlass": ["gemm_cutlass", "moe_cutlass", "quantization"],
    },
    **{
        version: {
            "dense": ["quantization"],
            "moe-auto": ["quantization"],
            "moe-flashinfer_cutlass": ["moe_cutlass", "quantization"],
        }
        for version in ("0.5.10.post1", "0.5.11")
    },
}
MODULE_OF_KIND = {"gemm_cutlass": "fp4_gemm_cutlass_sm120", "moe_cutlass": "fused_moe_120"}


def kinds_of(names: list[str]) -> list[str]:
    """Module names as fp4_warmup kinds; other modules keep their name."""
    prefixes = {"fp4_quantization_": "quantization", "fp4_gemm_cutlass": "gemm_cutlass", "fused_moe_120": "moe_cutlass"}
    return sorted({next((k for p, k in prefixes.items() if n.startswith(p)), n) for n in names})


def module_names(sglang: str, kinds: list[str]) -> list[str]:
    quant = QUANT.get(TARGETS[sglang], "fp4_quantization_120f")
    return sorted(quant if k == "quantization" else MODULE_OF_KIND[k] for k in kinds)


_cache: dict[tuple[str, bool], dict[str, Any]] = {}


def records(wheel_tree: Any, sglang: str, *, patched: bool) -> dict[str, Any]:
    """warmup_sim.run in one child: every model kind, patched or pristine trees."""
    key = (sglang, patched)
    if key not in _cache:
        trees = [
            wheel_tree("sglang", sglang, patched=patched),
            wheel_tree("flashinfer-python", TARGETS[sglang], patched=patched),
        ]
        code = "import sgsim\nsgsim.prepare()\n" + textwrap.dedent(
            f"""
            import json, warmup_sim
            out = warmup_sim.run({KINDS!r}, patched={patched!r})
            print("WARMUP " + json.dumps(out))
            """
        )
        result = run_python(code, path=[*trees, HERE, FLASHINFER_TESTS])
        lines = [ln for ln in result.stdout.splitlines() if ln.startswith("WARMUP ")]
        assert result.returncode == 0 and lines, tail(result)
        _cache[key] = json.loads(lines[-1][len("WARMUP ") :])
    return _cache[key]


@pytest.mark.parametrize("sglang", TARGETS)
def test_warmup_requests_the_modules_of_the_model_kind(wheel_tree: Any, sglang: str) -> None:
    patched = records(wheel_tree, sglang, patched=True)
    for kind in KINDS:
        rec = patched[kind["name"]]
        assert rec["backends"]["moe_runner_backend"] == kind["moe_runner_backend"], rec
        assert rec["kinds"] == EXPECTED_KINDS[sglang][kind["name"]], (kind, rec)
        assert rec["warmed"] == rec["kinds"], rec
        # fp4_warmup builds exactly those modules, from cold getters.
        assert sorted(rec["requested"]) == module_names(sglang, rec["kinds"]), (kind, rec)
    # The CUTLASS fused-MoE module (minutes to build) only for flashinfer_cutlass.
    assert "fused_moe_120" not in patched["dense"]["requested"]
    assert "fused_moe_120" not in patched["moe-auto"]["requested"]
    assert "fused_moe_120" in patched["moe-flashinfer_cutlass"]["requested"]


@pytest.mark.parametrize("sglang", TARGETS)
def test_warmup_builds_what_the_pristine_eager_forward_builds(wheel_tree: Any, sglang: str) -> None:
    """Dense layers: the patched warm-up builds the modules the pristine server's eager
    forward builds (piecewise off), no more, no fewer.

    Compared by kind: where torch.version.cuda (12.8 here) and nvcc (12.9) differ, the
    flashinfer series' 0001 picks the SM12x family quantization variant by nvcc
    (``fp4_quantization_120f``), pristine 0.6.7+ by torch (``fp4_quantization_120``)."""
    pristine = records(wheel_tree, sglang, patched=False)
    patched = records(wheel_tree, sglang, patched=True)
    for name in ("dense", "moe-auto"):
        eager = pristine[name]
        assert "eager_error" not in eager, eager
        assert eager["eager"], eager  # the recording sees the builds
        built_by_pristine = kinds_of(eager["eager"] + eager["at_load"])
        assert kinds_of(patched[name]["requested"]) == built_by_pristine, (name, patched[name], eager)
        # The patched eager forward builds nothing else either.
        assert set(patched[name]["eager"]) <= set(patched[name]["requested"]), patched[name]
    # MoE with flashinfer_cutlass: the linear layers' modules as above, plus the
    # fused-MoE module, which FlashInfer's cutlass_fused_moe (the only caller of
    # get_cutlass_fused_moe_module) builds on first use; the whole-model eager
    # forward is tests/models' job.
    fc = patched["moe-flashinfer_cutlass"]
    extra = set(kinds_of(fc["requested"])) - set(kinds_of(pristine["dense"]["eager"]))
    assert extra == {"moe_cutlass"}, fc
