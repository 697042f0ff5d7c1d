"""SGLang's NVFP4 layers under piecewise CUDA graph, simulated on SM120 and SM121 (CPU only).

Each case runs in a fresh interpreter (tests/harness/child.py) with the
sglang and flashinfer wheel trees first on the path and the device reported
as an SM120 GPU (or, where a case says so, a DGX Spark's GB10, SM121) before sglang
is imported.  The forward is traced through
sglang's own piecewise entry (install_torch_compiled, fullgraph=True, dynamic
token dimension) and split at sglang's registered split ops.
"""

from __future__ import annotations

import json
import pathlib
import re
import textwrap
from typing import Any

import pytest

from harness.child import run_python, tail
from harness.targets import (
    ci_versions,
    full_matrix,
    sglang_targets,
    sm12x_gpus,
    versions_with_topic,
)

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
HARNESS = REPO / "tests" / "harness"  # sgsim

# sglang version -> the flashinfer-python of its stack, for every stack in stacks.toml
# whose sglang series routes fp4_quantize through its op (what these layer checks test;
# 0.5.12+ have sglang's own op, and their NVFP4 layers trace pristine: tests/models).
TARGETS = {v: fi for v, fi in sglang_targets().items() if v in versions_with_topic("sglang", "fp4-quantize-op")}
SEED_ERROR = "Attempted to call function marked as skipped"
FP4_QUANT = "sglang.flashinfer_fp4_quantize"
# The targets whose series turn piecewise off for NSA models (Topic: nsa-piecewise-off).
NSA_OFF = [v for v in versions_with_topic("sglang", "nsa-piecewise-off") if v in TARGETS]
# The simulated SM12x GPUs: SM120 for every target; GB10 (SM121) for every target in the
# full tier (FP4GRAPH_MODELS=full), and in CI for the call sites of the seed's release.
SEED_VERSION = "0.5.9"


def gpu_targets(ci_sm121: bool = False) -> list[Any]:
    return [
        pytest.param(version, gpu, id=f"{version}-{gpu}" if gpu != "sm120" else version)
        for version in TARGETS
        for gpu in sm12x_gpus()
        if gpu == "sm120" or full_matrix() or (ci_sm121 and version == SEED_VERSION)
    ]


GPU_TARGETS = gpu_targets()
# Every target keeps its primary check in CI (pristine fails with the seed error, patched
# traces fullgraph beside the patched flashinfer, the NSA switch where its series has one);
# the secondary ones (beside the pristine flashinfer, the MoE path, the call sites, the fake,
# the warm-up, the module names) run on every target in the full tier and on the seed's and
# the newest release in CI (harness.targets.ci_versions).
SAMPLED = ci_versions(list(TARGETS), project="sglang")


def sampled(params: list[Any]) -> list[Any]:
    return [p for p in params if p.values[0] in SAMPLED]


def trace_targets() -> list[Any]:
    return [
        pytest.param(*p.values, fi_patched, id=f"{p.id}-{'patched' if fi_patched else 'pristine'}-flashinfer")
        for p in GPU_TARGETS
        for fi_patched in (False, True)
        if fi_patched or p.values[0] in SAMPLED
    ]


def has_series(project: str, version: str) -> bool:
    return (REPO / "patches" / project / version / "series").is_file()


def run_sim(body: str, *trees: pathlib.Path, gpu: str = "sm120") -> dict[str, Any]:
    code = f"import sgsim\nsgsim.prepare({gpu!r})\nimport torch\n" + textwrap.dedent(body)
    result = run_python(code, path=[*trees, HARNESS])
    lines = [line for line in result.stdout.splitlines() if line.startswith("SGSIM ")]
    assert lines, tail(result)
    return json.loads(lines[-1][len("SGSIM ") :])


TRACE_BLOCK = """
with sgsim.fake_mode():
    block = sgsim.Block(256, 512)
    x = torch.empty(8, 256, dtype=torch.bfloat16, device="cuda")
    sgsim.report(sgsim.trace(block, x))
"""

TRACE_MOE = """
with sgsim.fake_mode():
    block = sgsim.MoeBlock(256)
    x = torch.empty(8, 256, dtype=torch.bfloat16, device="cuda")
    sgsim.report(sgsim.trace(block, x))
"""


def trees_for(wheel_tree: Any, version: str, *, patched: bool, fi_patched: bool = False) -> list[pathlib.Path]:
    sglang = wheel_tree("sglang", version, patched=patched)
    flashinfer = wheel_tree("flashinfer-python", TARGETS[version], patched=fi_patched)
    return [sglang, flashinfer]


def assert_fp4_in_pieces(result: dict[str, Any]) -> None:
    assert result["ok"], result.get("error_text")
    assert result["graph_breaks"] == 0, result
    assert len(result["graphs"]) == 1, result  # one Dynamo graph: fullgraph
    pieces = result["graphs"][0]
    fp4 = [p for p in pieces if FP4_QUANT in p["ops"]]
    assert fp4, pieces
    for piece in pieces:
        if piece["split"]:
            assert not any(op in piece["ops"] for op in sgsim_fp4_ops()), piece
        else:
            assert "sglang.unified_attention_with_output" not in piece["ops"], piece


def sgsim_fp4_ops() -> tuple[str, ...]:
    return ("sglang.flashinfer_fp4_quantize", "sglang.fp4_gemm")


@pytest.mark.parametrize("version", TARGETS)
def test_pristine_fails_with_seed_error(wheel_tree: Any, version: str) -> None:
    result = run_sim(TRACE_BLOCK, *trees_for(wheel_tree, version, patched=False))
    assert not result["ok"], result
    assert "Unsupported" in result["error"] and SEED_ERROR in result["error"], result
    assert "allocate_lock" in result["error_text"], result["error_text"]


@pytest.mark.parametrize(("version", "gpu", "fi_patched"), trace_targets())
def test_patched_traces_fullgraph(wheel_tree: Any, version: str, gpu: str, fi_patched: bool) -> None:
    if fi_patched and not has_series("flashinfer-python", TARGETS[version]):
        pytest.skip(f"patches/flashinfer-python/{TARGETS[version]}/series does not exist yet")
    trees = trees_for(wheel_tree, version, patched=True, fi_patched=fi_patched)
    result = run_sim(TRACE_BLOCK, *trees, gpu=gpu)
    assert_fp4_in_pieces(result)
    # fp4 linear, attention (split point), fp4 linear: three pieces.
    assert [p["split"] for p in result["graphs"][0]] == [False, True, False], result
    assert result["out"] == [[8, 256], "torch.bfloat16"]


@pytest.mark.parametrize(("version", "gpu"), sampled(GPU_TARGETS))
def test_patched_moe_path_traces(wheel_tree: Any, version: str, gpu: str) -> None:
    result = run_sim(TRACE_MOE, *trees_for(wheel_tree, version, patched=True), gpu=gpu)
    assert result["ok"], result.get("error_text")
    assert result["graph_breaks"] == 0, result
    ops = [op for piece in result["graphs"][0] for op in piece["ops"]]
    assert ops.count(FP4_QUANT) == 2, ops  # linear + trtllm MoE hidden-state quantization
    assert "sglang.moe_forward_piecewise_cuda_graph_impl" in ops, ops
    assert not any(p["split"] and FP4_QUANT in p["ops"] for p in result["graphs"][0]), result


MOE_CALL_SITES = """
from sglang.srt.layers.quantization import fp4_utils
from sglang.srt.layers.quantization import modelopt_quant
from sglang.srt.layers.moe.moe_runner import flashinfer_trtllm
from sglang.srt.layers.moe.token_dispatcher import standard
from sglang.srt.layers.moe.fused_moe_triton import layer
op = fp4_utils.fp4_quantize
sites = {
    "modelopt_quant.fp4_quantize": modelopt_quant.fp4_quantize,
    "standard.fp4_quantize_flashinfer": standard.fp4_quantize_flashinfer,
}
# Call sites some releases have: the TRT-LLM MoE runner quantizes since 0.5.9 (0.5.8.x
# does it in FlashInferFP4MoE), the fused-MoE layer imports it up to 0.5.9.
for name, module in {"flashinfer_trtllm": flashinfer_trtllm, "fused_moe_triton.layer": layer}.items():
    if hasattr(module, "fp4_quantize"):
        sites[name + ".fp4_quantize"] = module.fp4_quantize
sgsim.report({name: fn is op for name, fn in sites.items()} | {"op": str(op)})
"""


@pytest.mark.parametrize(("version", "gpu"), sampled(gpu_targets(ci_sm121=True)))
def test_sm120_call_sites_use_the_op(wheel_tree: Any, version: str, gpu: str) -> None:
    """On every SM12x GPU (sglang's is_sm120_supported: capability major 12) the fp4 call
    sites go through the series' op."""
    result = run_sim(MOE_CALL_SITES, *trees_for(wheel_tree, version, patched=True), gpu=gpu)
    assert result.pop("op") == "sglang.flashinfer_fp4_quantize"
    assert all(result.values()), result


FAKE_CASES = [
    {"shape": [1, 256]},
    {"shape": [7, 256]},
    {"shape": [200, 4096]},
    {"shape": [130, 80]},  # K / 16 = 5: not a multiple of 4
    {"shape": [33, 96]},  # K / 16 = 6
    {"shape": [2, 5, 256]},
    {"shape": [7, 256], "kwargs": {"is_sf_swizzled_layout": False}},
    {"shape": [7, 256], "kwargs": {"is_sf_8x4_layout": True}},
    {"shape": [7, 256], "kwargs": {"sf_vec_size": 32}},
    {"shape": [256, 64], "column_major": True},
    {"shape": [256, 64], "column_major": True, "kwargs": {"is_sf_swizzled_layout": False}},
    {"shape": [2, 256, 64], "column_major": True},
]


@pytest.mark.parametrize("version", SAMPLED)
def test_fake_matches_pinned_flashinfer(wheel_tree: Any, version: str) -> None:
    body = f"sgsim.report({{'rows': sgsim.compare_fake_with_real({FAKE_CASES!r})}})"
    rows = run_sim(body, *trees_for(wheel_tree, version, patched=True))["rows"]
    mismatches = [row for row in rows if row["real"] != row["fake"]]
    assert not mismatches, json.dumps(mismatches, indent=1)


WARMUP = """
import flashinfer
from sglang.srt.layers.quantization import fp4_utils
calls = []
fp4_utils._flashinfer_fp4_quantize = lambda x, gs: calls.append(("eager", tuple(x.shape)))
with sgsim.fake_mode():
    dense = sgsim.Linear(256, 256)
    plain = torch.nn.Linear(8, 8)
    ran_plain = fp4_utils.warmup_flashinfer_fp4(torch.device("cuda"), plain)
    # A flashinfer without fp4_warmup(modules=...): one eager fp4_quantize.
    flashinfer.fp4_warmup = lambda device=None: calls.append(("all", str(device))) or []
    ran_eager = fp4_utils.warmup_flashinfer_fp4(torch.device("cuda"), dense)
    flashinfer.fp4_warmup = lambda device=None, *, modules=None: calls.append(("api", str(device), list(modules))) or []
    ran_api = fp4_utils.warmup_flashinfer_fp4(torch.device("cuda"), dense)
from sglang.srt.layers.quantization import fp4_utils as f
src = open(f.__file__.replace("layers/quantization/fp4_utils.py", "model_executor/piecewise_cuda_graph_runner.py")).read()
sgsim.report({"plain": ran_plain, "eager": ran_eager, "api": ran_api, "calls": calls,
    "order": src.index("warmup_flashinfer_fp4(self.device, self.model_runner.model)") < src.index("install_torch_compiled(\\n")})
"""


@pytest.mark.parametrize("version", SAMPLED)
def test_fp4_warmup_before_compile(wheel_tree: Any, version: str) -> None:
    result = run_sim(WARMUP, *trees_for(wheel_tree, version, patched=True))
    assert result["plain"] == []  # no NVFP4 layer, nothing to build
    assert result["eager"] == ["quantization"], result
    assert result["api"] == result["calls"][-1][2], result
    assert "quantization" in result["api"], result
    assert result["calls"][:1] == [["eager", [128, 64]]], result
    assert result["calls"][1][:2] == ["api", "cuda"], result
    assert result["order"], "warm-up must run before install_torch_compiled"


NSA_INDEXER = """
import types
from sglang.srt.layers.attention.nsa import nsa_indexer
indexer = object.__new__(nsa_indexer.Indexer)
torch.nn.Module.__init__(indexer)
indexer.alt_stream = None
indexer.index_topk = 2048
indexer.nsa_enable_prefill_cp = False
metadata = types.SimpleNamespace()
batch = types.SimpleNamespace(
    attn_backend=types.SimpleNamespace(get_indexer_metadata=lambda layer_id, fb: metadata),
    forward_mode=types.SimpleNamespace(is_extend_without_speculative=lambda: True),
)
from fp4graph.verify import simulate
with sgsim.fake_mode():
    batch.seq_lens_cpu = torch.empty(4, dtype=torch.int64)
    x = torch.empty(8, 256, dtype=torch.bfloat16, device="cuda")
    q = torch.empty(8, 64, dtype=torch.bfloat16, device="cuda")
    pos = torch.empty(8, dtype=torch.int64, device="cuda")
    fn = lambda x, q, pos: indexer.forward_cuda(x, q, pos, batch, 0)
    try:
        with simulate.compiling():
            torch.compile(fn, fullgraph=True, dynamic=True, backend="eager")(x, q, pos)
        sgsim.report({"ok": True})
    except Exception as exc:
        sgsim.report({"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:600]}"})
"""


def test_nsa_indexer_does_not_trace_on_0_5_9(wheel_tree: Any) -> None:
    """Pristine 0.5.9: the NSA indexer breaks fullgraph in extend mode (the series' NSA
    backport is tested in tests/models/test_nsa.py)."""
    result = run_sim(NSA_INDEXER, *trees_for(wheel_tree, "0.5.9", patched=False))
    assert not result["ok"], result
    # seq_lens_cpu.max().item() <= index_topk: a guard on a host value.
    assert "data-dependent" in result["error"] or "item" in result["error"], result


@pytest.mark.parametrize("version", NSA_OFF)
def test_nsa_indexer_does_not_trace(wheel_tree: Any, version: str) -> None:
    """Evidence for the nsa-piecewise-off patch: the pristine NSA indexer of the releases
    that carry it breaks fullgraph in extend mode."""
    result = run_sim(NSA_INDEXER, *trees_for(wheel_tree, version, patched=False))
    assert not result["ok"], result
    # seq_lens_cpu.max().item() <= index_topk: a guard on a host value.
    assert "data-dependent" in result["error"] or "item" in result["error"], result


NSA_RUNNER = """
import ast, types, logging
from sglang.srt.configs.model_config import is_deepseek_nsa
from sglang.srt.layers.moe.utils import get_moe_a2a_backend
import sglang.srt.configs.model_config as model_config
path = model_config.__file__.replace("configs/model_config.py", "model_executor/model_runner.py")
tree = ast.parse(open(path).read())
cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelRunner")
fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "can_run_piecewise_cuda_graph")
logged = []
ns = {"is_deepseek_nsa": is_deepseek_nsa, "get_moe_a2a_backend": get_moe_a2a_backend,
      "logger": logging.getLogger("t"), "log_info_on_rank0": lambda lg, msg: logged.append(msg)}
exec(compile(ast.Module([fn], []), path, "exec"), ns)
def runner(arch, index_topk):
    cfg = types.SimpleNamespace(architectures=[arch], index_topk=index_topk)
    return types.SimpleNamespace(is_draft_worker=False, pp_size=1,
        server_args=types.SimpleNamespace(enable_torch_compile=False),
        model_config=types.SimpleNamespace(hf_config=cfg, hf_text_config=cfg))
# DeepSeek-V3.2: an NSA architecture of every release with the NSA backend (GLM-5's
# GlmMoeDsaForCausalLM is one from 0.5.9 on).
nsa = ns["can_run_piecewise_cuda_graph"](runner("DeepseekV32ForCausalLM", 2048))
nsa_log = list(logged)
llama = ns["can_run_piecewise_cuda_graph"](runner("LlamaForCausalLM", None))
sgsim.report({"nsa": nsa, "nsa_log": nsa_log, "llama": llama, "logs": logged})
"""


@pytest.mark.parametrize("version", NSA_OFF)
def test_nsa_models_skip_piecewise(wheel_tree: Any, version: str) -> None:
    """The series that turn piecewise off for NSA models (Topic: nsa-piecewise-off) do."""
    result = run_sim(NSA_RUNNER, *trees_for(wheel_tree, version, patched=True))
    assert result["nsa"] is False
    assert len(result["nsa_log"]) == 1 and "NSA" in result["nsa_log"][0], result
    assert result["llama"] is True and result["logs"] == result["nsa_log"], result


@pytest.mark.parametrize("version", ["0.5.12"])
def test_control_sglang_own_fp4_op_traces_pristine(wheel_tree: Any, version: str) -> None:
    """Control: pristine sglang 0.5.12 (its own fp4_quantize op, the name the series give
    theirs) beside pristine flashinfer 0.6.11.post1 traces the block with the fp4 op in
    captured pieces: the harness passes a release that needs no fp4 fix (full tier:
    nox -s "tracing(torch='2.11.0')", where --stack sglang-0.5.12 selects it)."""
    if not full_matrix():
        pytest.skip("FP4GRAPH_MODELS=full (nox -s tracing): a control, not a primary check")
    flashinfer = sglang_targets()[version]
    trees = [wheel_tree("sglang", version, patched=False), wheel_tree("flashinfer-python", flashinfer, patched=False)]
    assert_fp4_in_pieces(run_sim(TRACE_BLOCK, *trees))


MODULE_NAMES = """
import importlib
# sglang's own import order (a model's quantization config loads first); importing
# some touched modules alone hits sglang's circular imports.
import sglang.srt.layers.quantization.modelopt_quant
names = {{}}
for module in {modules!r}:
    namespace = vars(importlib.import_module(module))
    names[module] = {{k: v is None for k, v in namespace.items() if not k.startswith("__")}}
sgsim.report(names)
"""


def touched_modules(version: str) -> list[str]:
    """The sglang modules the series' patches change (their python/ paths)."""
    series = REPO / "patches" / "sglang" / version
    modules = set()
    for name in (series / "series").read_text().split():
        for path in re.findall(r"^diff --git a/python/(\S+)\.py ", (series / name).read_text(), re.M):
            modules.add(path.replace("/", ".").removesuffix(".__init__"))
    return sorted(modules)


@pytest.mark.parametrize("version", SAMPLED)
def test_patched_modules_bind_every_name_pristine_binds(wheel_tree: Any, version: str) -> None:
    """No module-level name the series touches goes missing or turns None (0.5.11's first
    series set standard.nvfp4_block_scale_interleave_flashinfer to None whenever
    flashinfer imported, breaking the flashinfer_cutlass FP4 all-gather path)."""
    body = MODULE_NAMES.format(modules=touched_modules(version))
    pristine = run_sim(body, *trees_for(wheel_tree, version, patched=False))
    patched = run_sim(body, *trees_for(wheel_tree, version, patched=True))
    assert pristine.keys() == patched.keys() and len(pristine) >= 3
    for module, names in pristine.items():
        lost = sorted(k for k, is_none in names.items() if not is_none and patched[module].get(k, True))
        assert not lost, (module, lost)
