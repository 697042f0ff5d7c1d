"""The piecewise warm-up builds the FlashInfer fp4 modules the model uses, and no others.

sglang's ``PiecewiseCudaGraphRunner`` (patched) builds FlashInfer's fp4 JIT modules
before torch.compile traces the model.  The goal: a patched server's first start
compiles no module that the pristine server with piecewise CUDA graph off would not
compile for the same model (the CUTLASS fused-MoE module alone takes minutes).

Per sglang stack (every one of patches/stacks.toml in ``nox -s tracing``; in CI the seed
stack's and the newest, the two warm-up generations: 0.5.8.x / 0.5.9 build the CUTLASS fp4
GEMM, 0.5.10+ cuDNN's) and model kind, with the
whole-model simulation (modelsim.py: real sglang model classes built by its loader,
ServerArgs, ModelRunner and runners; its stand-ins are listed there) and the hooks of
warmup_hooks.py (sglang's ops run their own bodies in the eager phases, the
Scheduler's fp4 GEMM backend selection, cuDNN's frontend):

* patched, ``--disable-cuda-graph`` (no eager forward before piecewise, so the warm-up
  is the first to build): the fp4 kinds ``warmup_flashinfer_fp4`` asks for and the
  JIT modules it builds;
* pristine, piecewise CUDA graph off (otherwise the default server: decode CUDA
  graphs and their eager forwards): every JIT module the start builds.

The warm-up must build exactly the fp4 modules the pristine start builds, compared by
kind (the flashinfer series' 0001 picks the SM12x quantization variant by nvcc,
pristine 0.6.7+ by torch.version.cuda: ``fp4_quantization_120f`` vs ``_120`` here).  The
simulated SM120 answers the CUDA of the stack's torch (``simulation.simulated_cuda``: 12.8
up to 0.5.10.post1, 13.0 from 0.5.11).

Model kinds in CI: dense (LlamaForCausalLM), MoE on sglang's default MoE runner
(``auto``: sglang's CUTLASS fp4 MoE) and on ``--moe-runner-backend flashinfer_cutlass``
(Qwen3MoeForCausalLM); ``FP4GRAPH_MODELS=full`` (``nox -s tracing``): every family.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from fp4graph.model import warmup as warmup_kinds
from harness.child import run_python, tail
from harness.models import families, simulation
from harness.targets import SEED_STACK, full_matrix, versions_with_topic

HERE = pathlib.Path(__file__).resolve().parent
FULL = full_matrix()


def kinds(sglang: str) -> dict[str, tuple[str, str]]:
    """Model kind id -> (family, MoE runner backend), of the families ``sglang`` runs."""
    if not FULL:
        return {
            "dense": ("llama", "auto"),
            "moe-auto": ("qwen3-moe", "auto"),
            "moe-flashinfer_cutlass": ("qwen3-moe", "flashinfer_cutlass"),
        }
    out = {}
    for name in (n for n in families.names() if families.runs_on(n, sglang)):
        moe = families.ROWS[name]["kind"] == "moe"
        for backend in ("auto", "flashinfer_cutlass") if moe else ("auto",):
            out[f"{name}-{backend}"] = (name, backend)
    return out


def expected(sglang: str, backend: str) -> list[str]:
    """The kinds fp4graph.model.warmup says the warm-up of ``sglang`` requests (the kernels
    build's defaults); a release without a row fails here, naming the table."""
    return sorted(warmup_kinds.requested(sglang, backend))


FP4_PREFIXES = {
    "fp4_quantization_": "quantization",
    "fp4_gemm_cutlass": "gemm_cutlass",
    "trtllm_gemm": "gemm_trtllm",
    "fused_moe_trtllm": "moe_trtllm",
    "fused_moe_1": "moe_cutlass",  # fused_moe_100 / _103 / _120
}


def fp4_kinds(names: list[str]) -> list[str]:
    """The fp4_warmup kinds among JIT module names (other modules are left out)."""
    return sorted({k for n in names for p, k in FP4_PREFIXES.items() if n.startswith(p)})


# 0.5.9: piecewise is opt-in (modelsim turns it on); 0.5.10+: on by default. The NSA
# family rows enforce it (families.py): off means that too (a field a release lacks is dropped).
PIECEWISE_OFF = {"enable_piecewise_cuda_graph": False, "disable_piecewise_cuda_graph": True,
                 "enforce_piecewise_cuda_graph": False}
_CACHE: dict[tuple[str, bool], dict[str, Any]] = {}


def reports(wheel_tree: Any, target: simulation.SglangStack, *, patched: bool) -> dict[str, Any]:
    """One child per (stack, side), every model kind in a fork of it."""
    key = (target.name, patched)
    if key in _CACHE:
        return _CACHE[key]
    model_kinds = kinds(target.sglang)
    cases = [
        simulation.case(family, moe_runner_backend=backend, cuda_graph=not patched, **({} if patched else PIECEWISE_OFF))
        for family, backend in model_kinds.values()
    ]
    path, record = simulation.trees(wheel_tree, target, patched=patched, cases=cases)
    code = (
        "import json\nfrom harness.models import warmup_hooks\nwarmup_hooks.install_real_op_bodies()\n"
        "from harness.models import modelsim, stand_ins\n"
        f"modelsim.prepare({str(record)!r}, cuda_version={simulation.simulated_cuda(target, 'sm120')!r})\n"
        f"warmup_hooks.observe_model_warmup(real_bodies={not patched!r})\n"
        f"stand_ins.report('RESULT', modelsim.run_cases(json.loads({json.dumps(cases)!r})))\n"
    )
    result = run_python(code, path=path, timeout=3600)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")]
    assert result.returncode == 0 and lines, tail(result, 6000)
    _CACHE[key] = dict(zip(model_kinds, json.loads(lines[-1][len("RESULT ") :]), strict=True))
    return _CACHE[key]


def brief(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k not in ("graphs", "traceback")} | {
        "traceback": report.get("traceback", "")[-3000:]
    }


WARMED = set(versions_with_topic("sglang", "fp4-warmup"))


def _stacks() -> list[simulation.SglangStack]:
    """Every stack (full tier); CI: the seed's and the newest whose series has the warm-up."""
    every = simulation.sglang_stacks()
    newest = [s for s in every if s.sglang in WARMED][-1]
    return every if FULL else [s for s in every if s.name == SEED_STACK or s is newest]


@pytest.mark.parametrize("target", _stacks(), ids=lambda s: s.name)
def test_warmup_builds_the_fp4_modules_the_pristine_start_builds(
    wheel_tree: Any, target: simulation.SglangStack
) -> None:
    pristine = reports(wheel_tree, target, patched=False)
    if target.sglang not in WARMED:
        # No warm-up in its series (0.5.12+: sglang's own fp4 op): the row is what the
        # pristine start builds, the kinds the kernels build makes by default.
        for kind, (_family, backend) in kinds(target.sglang).items():
            off = pristine[kind]
            assert off["ok"] and off["piecewise_runner"] is None, brief(off)
            assert fp4_kinds(off["jit_modules"]) == expected(target.sglang, backend), (kind, off["jit_modules"])
        return
    patched = reports(wheel_tree, target, patched=True)
    for kind, (_family, backend) in kinds(target.sglang).items():
        off, on = pristine[kind], patched[kind]
        assert off["ok"] and off["piecewise_runner"] is None, brief(off)  # started, piecewise off
        assert on["ok"] and on["piecewise_runner"] == "PiecewiseCudaGraphRunner", brief(on)
        assert off["moe_runner_backend"] == on["moe_runner_backend"], (kind, off, on)
        (warmup,) = on["warmups"]
        assert warmup["warmed"] == warmup["kinds"], (kind, warmup)
        # fp4_warmup built exactly the modules of those kinds, from cold getters ...
        assert fp4_kinds(warmup["built"]) == warmup["kinds"] and len(warmup["built"]) == len(warmup["kinds"]), (
            kind,
            warmup,
        )
        # ... which are the fp4 modules the pristine start (piecewise off) builds.
        assert warmup["kinds"] == fp4_kinds(off["jit_modules"]), (kind, warmup, off["jit_modules"])
        want = expected(target.sglang, backend)
        assert warmup["kinds"] == want, (kind, warmup, want)


def _jit_build() -> Any:
    import importlib.util

    path = HERE.parents[1] / "benchmarks" / "jit_build.py"
    spec = importlib.util.spec_from_file_location("jit_build", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_jit_build_benchmark_measures_these_kinds() -> None:
    """benchmarks/jit_build.py's table of model kinds is the one checked above."""
    jit_build = _jit_build()
    by_kind = {"dense": "auto", "moe-auto": "auto", "moe-flashinfer_cutlass": "flashinfer_cutlass"}
    measured = [t for t in simulation.sglang_stacks() if t.flashinfer in jit_build.STACK_OF]
    assert measured, "benchmarks/jit_build.py measures no stack of patches/stacks.toml"
    for target in measured:
        assert jit_build.STACK_OF[target.flashinfer] == target.name
        table = jit_build.MODEL_KINDS[target.name]
        assert set(table) == set(by_kind), table
        for model_kind, backend in by_kind.items():
            assert sorted(table[model_kind]) == expected(target.sglang, backend), (target.name, model_kind)


def test_jit_build_benchmark_dry_run(wheel_tree: Any, tmp_path: pathlib.Path) -> None:
    """--dry-run: the SM120 specs of the patched tree and their ninja files (sm_120a), no nvcc."""
    tree = wheel_tree("flashinfer-python", "0.6.3", patched=True)
    script = HERE.parents[1] / "benchmarks" / "jit_build.py"
    code = f"import runpy, sys\nsys.argv = {[str(script), '--dry-run', '--flashinfer', str(tree), '--out', str(tmp_path / 'out'), '--workdir', str(tmp_path / 'work')]!r}\nrunpy.run_path(sys.argv[0], run_name='__main__')\n"
    result = run_python(code, timeout=900)
    assert result.returncode == 0, tail(result)
    record = json.loads((tmp_path / "out" / "jit_build.json").read_text())
    (modules,) = record["modules"].values()
    assert {k: m["module"] for k, m in modules.items()} == {
        "quantization": "fp4_quantization_120",
        "gemm_cutlass": "fp4_gemm_cutlass_sm120",
        "moe_cutlass": "fused_moe_120",
    }, modules
    for rec in modules.values():
        assert rec["status"] == "dry-run", rec
        ninja = pathlib.Path(rec["build_dir"]) / "build.ninja"
        assert "sm_120a" in ninja.read_text(), ninja
    table = (tmp_path / "out" / "jit_build.md").read_text()
    assert "| sglang-0.5.9 (0.6.3+fp4graph." in table and "not measured" in table, table
