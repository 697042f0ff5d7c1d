"""GLM-5 / DeepSeek-V3.2 (NSA sparse attention) under sglang's piecewise CUDA graph.

The series' 0003-nsa-piecewise-cuda-graph (a backport of sglang PR #23351) against the
same series without it, on a simulated SM120 (tests/harness/models/nsa_sim.py lists every
stand-in).  Each case runs in a fresh interpreter.

- Tracing the NSA block (indexer + attention split op, ModelOpt NVFP4 projections)
  needs a CUDA build of torch: a CPU build cannot index or slice a fake CUDA tensor.
  ``nox -s tracing`` runs them under each stack's own (CUDA) torch pin; ``nox -s tests``
  (CPU torch) skips them with that reason.
- The split-op-vs-eager comparisons and the attention schema need no CUDA torch;
  ``nox -s tests`` runs the comparison on :data:`CI_VERSION` (the seed user's
  release) only, ``nox -s tracing`` (``FP4GRAPH_MODELS=full``) all of it on every
  stack whose series carries the backport.  (That 0.5.9 runs NSA models piecewise
  is checked through its own ModelRunner in tests/integration.)  What
  cannot run on a CPU is replaced by torch references there (and named in
  nsa_sim.compare_split_op_with_eager): the fp8 MQA-logits kernel (deep_gemm), the
  top-k transform kernel, the index-k cache read (Triton), the attention kernels.  The
  fp8 k-cache store (act_quant Triton kernel / JIT fused store) is not compared at all.
- Not simulated here: the whole model and the eager forward before compile (both in
  tests/models/test_models.py, the glm5 / deepseek-v3.2 rows), SM120 numerics.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import textwrap
from typing import Any

import pytest
import torch

from fp4graph.model.series import load_series
from harness.child import TESTS, run_python, tail
from harness.targets import full_matrix, sglang_targets, sm12x_gpus, versions_with_topic

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
SGSIM = REPO / "tests" / "harness"
TOPIC = "nsa-piecewise-cuda-graph"  # the backport of sglang PR #23351

# sglang version -> the flashinfer-python of its stack, for every series with the backport.
TARGETS = {v: fi for v, fi in sglang_targets().items() if v in versions_with_topic("sglang", TOPIC)}
FULL = full_matrix()  # nox -s tracing
CI_VERSION = "0.5.9"  # the seed user's release
ARCHS = ["GlmMoeDsaForCausalLM", "DeepseekV32ForCausalLM"]
SPLIT_OP = "sglang.k_cache_and_topk_result"
ATTN_OP = "sglang.unified_attention_with_output"
FP4_OPS = ("sglang.flashinfer_fp4_quantize", "sglang.fp4_gemm")
INDEXER_OPS = ("sglang.layernorm", "sglang.hadamard_transform", "sglang.logits_head_gate_pcg")

needs_cuda_torch = pytest.mark.skipif(
    not torch.backends.cuda.is_built(),
    reason="a CPU build of torch cannot slice fake CUDA tensors; nox -s tracing runs this",
)


def tracing_only(version: str) -> None:
    """In ``nox -s tests``, only :data:`CI_VERSION` runs (each case is a child of ~20 s)."""
    if not FULL and version != CI_VERSION:
        pytest.skip(f"sglang {version}: nox -s tracing runs this (CI runs {CI_VERSION})")


def backport_patch(version: str) -> pathlib.Path:
    series = load_series(REPO / "patches", "sglang", version)
    assert series is not None, version
    return next(p.path for p in series.patches if TOPIC in p.topics)


def run_child(body: str, *trees: pathlib.Path) -> dict[str, Any]:
    code = "from harness.models import nsa_sim\n" + textwrap.dedent(body)
    result = run_python(code, path=[*trees, SGSIM, TESTS])
    lines = [line for line in result.stdout.splitlines() if line.startswith("NSA ")]
    assert lines, tail(result)
    return json.loads(lines[-1][len("NSA ") :])


@pytest.fixture(scope="session")
def nsa_trees(wheel_tree: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``nsa_trees(version, backport)``: [sglang, flashinfer] trees of the patched stack,
    with or (backport=False) without the NSA topic (the rest of the series applied)."""
    cache: dict[tuple[str, bool], list[pathlib.Path]] = {}

    def get(version: str, backport: bool) -> list[pathlib.Path]:
        key = (version, backport)
        if key not in cache:
            sglang = wheel_tree("sglang", version, patched=True)
            if not backport:
                copy = tmp_path_factory.mktemp(f"sglang-{version}-without-nsa")
                shutil.copytree(sglang / "sglang", copy / "sglang")
                subprocess.run(
                    ["git", "apply", "-R", "-p2", str(backport_patch(version))], cwd=copy, check=True
                )
                sglang = copy
            # Patched where its series exists (a flashinfer pinned without one stays pristine).
            fi_series = (REPO / "patches" / "flashinfer-python" / TARGETS[version] / "series").is_file()
            flashinfer = wheel_tree("flashinfer-python", TARGETS[version], patched=fi_series)
            cache[key] = [sglang, flashinfer]
        return cache[key]

    return get


TRACE = """
import json
nsa_sim.prepare({gpu!r})
print("NSA " + json.dumps(nsa_sim.trace_block({static}, {real}, {arch!r})))
"""
# GB10 (SM121) beside SM120 in the full tier (nox -s tracing, where these run).
GPUS = sm12x_gpus() if full_matrix() else ["sm120"]


@needs_cuda_torch
@pytest.mark.parametrize("version", TARGETS)
def test_without_backport_fails_at_the_indexer(nsa_trees: Any, version: str) -> None:
    """The fp4 series alone: Dynamo stops at Indexer.forward_cuda's seq_lens_cpu.max().item()
    (torch 2.10+: the guard on the unbacked read, ``max_kv_len <= index_topk``; torch 2.9,
    whose Dynamo does not capture the scalar there: at the ``.item()`` itself)."""
    result = run_child(TRACE.format(static=16, real=16, arch=ARCHS[0], gpu="sm120"), *nsa_trees(version, False))
    assert not result["ok"], result
    guard = "Could not guard on data-dependent expression" in result["error"] and "<= 2048" in result["error"]
    host_read = "Unsupported Tensor.item() call" in result["error"]
    assert guard or host_read, result
    assert "nsa_indexer.py" in result["error_text"], result["error_text"]
    if host_read:
        assert "seq_lens_cpu.max().item()" in result["error_text"], result["error_text"]


def assert_nsa_pieces(result: dict[str, Any]) -> None:
    assert result["ok"], result.get("error_text")
    assert result["graph_breaks"] == 0, result
    # One Dynamo graph, or two on a cold start: the first trace fills a cache_once
    # (sglang.jit_kernel.utils) the rotary embedding reads, and the second call
    # recompiles on that guard.  sglang's runner allows recompiles; the eager forward
    # before compile (the default server start) fills it first.
    assert 1 <= len(result["graphs"]) <= 2, result
    for pieces in result["graphs"]:
        assert [p["split"] for p in pieces] == [False, True, False, True, False], pieces
        assert pieces[1]["ops"] == [SPLIT_OP] and pieces[3]["ops"] == [ATTN_OP], pieces
        captured = [op for p in pieces if not p["split"] for op in p["ops"]]
        for op in (*FP4_OPS, *INDEXER_OPS):
            assert op in captured, (op, pieces)


@needs_cuda_torch
@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("version", TARGETS)
def test_backport_traces_with_the_indexer_in_a_split_op(nsa_trees: Any, version: str, arch: str, gpu: str) -> None:
    result = run_child(TRACE.format(static=16, real=16, arch=arch, gpu=gpu), *nsa_trees(version, True))
    assert_nsa_pieces(result)
    assert result["out"] == [[16, 256], "torch.bfloat16"]


@needs_cuda_torch
@pytest.mark.parametrize("version", TARGETS)
def test_backport_traces_a_padded_replay_batch(nsa_trees: Any, version: str) -> None:
    """A replay batch: static buffers of 16 tokens, 11 real ones (extend_num_tokens)."""
    assert_nsa_pieces(run_child(TRACE.format(static=16, real=11, arch=ARCHS[0], gpu="sm120"), *nsa_trees(version, True)))


SCHEMA = """
import json
nsa_sim.prepare()
import torch
import sglang.srt.layers.radix_attention  # registers the split op
schema = str(torch.ops.sglang.unified_attention_with_output.default._schema)
print("NSA " + json.dumps({"schema": schema}))
"""


@pytest.mark.parametrize("version", TARGETS)
def test_attention_split_op_schema_carries_topk_indices(nsa_trees: Any, version: str) -> None:
    """Without the backport, RadixAttention's topk_indices=... fails on 0.5.10+:
    "Unknown keyword argument 'topk_indices' for operator 'sglang::unified_attention_with_output'"."""
    if not FULL:  # the whole-model rows meet this schema on CI_VERSION in nox -s tests
        pytest.skip("nox -s tracing runs this")
    without = run_child(SCHEMA, *nsa_trees(version, False))["schema"]
    with_backport = run_child(SCHEMA, *nsa_trees(version, True))["schema"]
    assert "topk_indices" not in without, without
    for arg in ("topk_indices", "cos_sin_cache", "is_neox", "llama_4_scaling"):
        assert arg in with_backport, with_backport


COMPARE = """
import json
nsa_sim.cpu_kernels_too()
nsa_sim.prepare()
print("NSA " + json.dumps(nsa_sim.compare_split_op_with_eager()))
"""


@pytest.mark.parametrize("version", TARGETS)
def test_split_op_path_computes_what_the_eager_path_computes(nsa_trees: Any, version: str) -> None:
    tracing_only(version)
    result = run_child(COMPARE, *nsa_trees(version, True))
    assert result["head_gate"] == {"shape": [7, 4, 1], "equal": True}, result
    topk = result["topk"]
    assert topk["real_rows_equal"] and topk["padding_rows_minus_one"], result
    assert topk["some_selected"] > 0, result
    attention = result["attention"]
    assert attention["rows_seen"] == [5, 5, 5], result  # q, topk_indices, out_cache_loc
    assert attention["real_rows_equal"] and attention["out_cache_loc_restored"], result
