"""Whole NVFP4 models under sglang's piecewise CUDA graph runner, every sglang stack.

Each (stack, pristine | patched) pair runs its cases in one child interpreter
(tests/harness/models/simulation.py; what is real and what is stood in:
tests/harness/models/modelsim.py).  A case is a model family (tests/harness/models/families.py)
x start order (``cuda-graph``: the default server, decode CUDA graphs captured
before the piecewise compile; ``no-cuda-graph``: ``--disable-cuda-graph``) x MoE
runner backend (``auto``; MoE families also ``flashinfer_cutlass``).

Pristine fails with the seed error (a release measured pristine before its stack: what
its row in :data:`harness.models.expected.PRISTINE_OF_STACKS` says (None: the seed error); or, where listed in :data:`EARLIER_FAILURES`, with
an upstream bug the trace meets first; DSA (NSA) families: at the NSA code,
:data:`NSA_PRISTINE_FAILURES`; on GB10 with decode CUDA graphs, 0.5.10+ stop before the
piecewise compile, in the capture, also in :data:`EARLIER_FAILURES`); patched traces every family with 0 graph breaks, the
fp4 ops inside captured (non-split) pieces.  NSA families (GLM-5, DeepSeek-V3.2) also:
sglang's NSA attention backend as it is picked on SM120, the indexer's k-cache store
and top-k inside the ``k_cache_and_topk_result`` split op (its body runs there, its
kernels never appear in a captured piece), and a replay of a padded extend batch whose
split ops see only the real tokens.

Which part of the matrix runs: ``FP4GRAPH_MODELS=full`` (``nox -s tracing`` sets
it) runs all of it on every stack; otherwise (CI) :data:`CI_STACK` runs every
family but the NSA ones patched in both start orders (MoE families with
``flashinfer_cutlass`` in the default one) and pristine once each, and every other
stack runs :data:`EVERY_STACK_FAMILY` patched in both orders and pristine once.  An
NSA case costs about 45 s on CI's 2 cores (a whole-model build, compile and capture
of every size, a replay), so CI runs only :data:`NSA_CI_FAMILY` on :data:`CI_STACK`,
patched in the default start order and pristine once; ``nox -s tracing`` runs every
NSA case on every stack.  These rows trace with CPU torch (``nox -s tests``) as well
as with the stacks' CUDA torch pins (``nox -s tracing``).

The simulated GPU is the RTX PRO 6000 (SM120) unless a case names another SM12x GPU
(``-sm121`` in its id: the DGX Spark's GB10, compute capability 12.1, 48 SMs, unified
memory).  The full tier runs the whole matrix on each of them; CI none on GB10 (its
GB10 subset is tests/sglang's call-site check: a whole-model case costs about 90 s).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from harness.models import families, simulation
from harness.models.expected import (
    ATTENTION,
    FP4_GEMM,
    FP4_QUANTIZE,
    MOE,
    PRISTINE_OF_STACKS_TABLE,
    REPLAY_TOKENS,
    Outcome,
    assert_nsa,
    describe,
    expect,
)
from harness.models.reports import GroupedReports
from harness.targets import SEED_STACK, full_matrix, sm12x_gpus, versions_with_topic

SEED_ERROR = "Attempted to call function marked as skipped"
NSA = families.NSA_FAMILIES

CI_STACK = SEED_STACK  # the seed user's release, and the one with the most fixes
EVERY_STACK_FAMILY = "deepseek-v3-no-fusion"  # MLA + flashinfer-routed MoE: the widest path
NSA_CI_FAMILY = "glm5"  # the seed user's model
FULL = full_matrix()
# Every SM12x GPU the simulation knows (SM120: RTX PRO 6000; SM121: DGX Spark's GB10).
SIMULATED_GPUS = sm12x_gpus()


@dataclasses.dataclass(frozen=True)
class Case:
    family: str
    moe_runner_backend: str = "auto"
    cuda_graph: bool = True
    gpu: str = "sm120"  # a key of fp4graph.verify.simulate.GPUS

    @property
    def id(self) -> str:
        order = "cuda-graph" if self.cuda_graph else "no-cuda-graph"
        gpu = "" if self.gpu == "sm120" else f"-{self.gpu}"
        return f"{self.family}-{self.moe_runner_backend}-{order}{gpu}"

    def request(self) -> dict[str, Any]:
        return simulation.case(
            self.family,
            moe_runner_backend=self.moe_runner_backend,
            cuda_graph=self.cuda_graph,
            replay_tokens=REPLAY_TOKENS if self.family in NSA else None,
        )



def every_case(sglang: str, gpu: str = "sm120") -> list[Case]:
    """The full tier's cases of ``sglang`` on ``gpu``: every family, MoE runner and start order."""
    out = []
    for family in (f for f in families.names() if families.runs_on(f, sglang)):
        backends = ["auto", "flashinfer_cutlass"] if families.ROWS[family]["kind"] == "moe" else ["auto"]
        for backend in backends:
            for cuda_graph in (True, False):
                out.append(Case(family, backend, cuda_graph, gpu))
    return out


def matrix(stack_name: str, patched: bool) -> list[Case]:
    if FULL:
        return [c for gpu in SIMULATED_GPUS for c in every_case(simulation.stack(stack_name).sglang, gpu)]
    ci = stack_name == CI_STACK or CI_STACK not in [s.name for s in simulation.sglang_stacks()]
    if not ci:
        orders = (True, False) if patched else (False,)
        return [Case(EVERY_STACK_FAMILY, cuda_graph=order) for order in orders]
    names = [name for name in families.names() if name not in NSA]
    if not patched:  # the seed error comes first whatever follows: one start order
        return [Case(name, cuda_graph=False) for name in [*names, NSA_CI_FAMILY]]
    out = []
    for name in names:
        out += [Case(name, cuda_graph=True), Case(name, cuda_graph=False)]
        if families.ROWS[name]["kind"] == "moe":
            out.append(Case(name, "flashinfer_cutlass", cuda_graph=True))
    out.append(Case(NSA_CI_FAMILY, cuda_graph=True))
    return out


@dataclasses.dataclass(frozen=True)
class EarlierFailure:
    """An upstream bug (not fp4) a pristine release hits before the seed error: in the
    piecewise compile, or in the decode CUDA graph capture before it (``stage``)."""

    fixed_by: str  # the topic of the series' fix: the releases whose series carry it have the bug
    families: tuple[str, ...]
    cuda_graph: bool
    error: str  # in the error's text
    where: str  # in the traceback or the error's text
    gpus: tuple[str, ...] = tuple(SIMULATED_GPUS)
    stage: str = "init_piecewise_cuda_graphs"

    def matches(self, stack: simulation.SglangStack, case: Case, report: dict[str, Any]) -> bool:
        text = report.get("error_text", "") + report.get("traceback", "")
        return (
            stack.sglang in versions_with_topic("sglang", self.fixed_by)
            and case.family in self.families
            and case.cuda_graph == self.cuda_graph
            and case.gpu in self.gpus
            and self.error in report.get("error_text", "")
            and self.where in text
        )


@dataclasses.dataclass(frozen=True)
class NsaFailure:
    """Where pristine sglang stops an NSA model under piecewise (issue 14)."""

    error: str  # in the error's text
    where: str  # in the traceback or the error's text
    why: str

    def matches(self, report: dict[str, Any]) -> bool:
        text = report.get("error_text", "") + report.get("traceback", "")
        return self.error in text and self.where in text


NSA_PRISTINE_FAILURES = [
    # Indexer.forward_cuda: max_kv_len = seq_lens_cpu.max().item(); max_kv_len <= index_topk.
    NsaFailure(
        error="Could not guard on data-dependent expression u0 <= 2048",
        where="nsa_indexer.py",
        why="the indexer branches on a host read of the batch's sequence lengths",
    ),
    # The same host read on torch 2.9 (the 0.5.8-0.5.10.post1 pin), whose Dynamo stops at
    # the .item() itself instead of guarding on the unbacked result.
    NsaFailure(
        error="Unsupported Tensor.item() call with capture_scalar_outputs=False",
        where="nsa_indexer.py",
        why="the indexer branches on a host read of the batch's sequence lengths",
    ),
    # RadixAttention passes topk_indices (and the MLA rope arguments) to the attention
    # split op, whose schema lacks them; 0.5.10+ meet it in the eager forward before compile.
    NsaFailure(
        error="sglang::unified_attention_with_output() expected at most",
        where="radix_attention.py",
        why="the attention split op's schema lacks topk_indices",
    ),
]

EARLIER_FAILURES = [
    # On torch 2.9 (the stacks' pin; torch 2.13 traces it): the first trace meets the
    # attention before the first fp4 linear, and its lazy init (deepseek_v2.py
    # forward_prepare sets self.attn_mha.kv_b_proj; 0.5.9: line 1384) fails without an
    # eager forward first.
    EarlierFailure(
        fixed_by="eager-forward-before-compile",  # 0006 of 0.5.8-0.5.9
        families=("deepseek-v3", "deepseek-v3-no-fusion", *NSA),
        cuda_graph=False,
        error="builtin isinstance() cannot determine type of argument",
        where="forward_prepare",
    ),
    # 0.5.10+: the NSA indexer's torch.compile-d weights projection calls DeepGEMM, whose
    # first call pre-compiles inside the trace; on unified memory the free-memory read is
    # psutil's, a graph break, and the budget comparison guards on an unbacked float.
    EarlierFailure(
        fixed_by="deep-gemm-precompile-eager",  # 0004 of 0.5.10-0.5.11
        families=tuple(NSA),
        cuda_graph=True,
        error="Could not guard on data-dependent expression zuf0",
        where="deep_gemm_wrapper/compile_utils.py",
        gpus=("sm121",),
        stage="init_device_graphs",
    ),
]

STACKS = simulation.sglang_stacks()
PARAMS = [
    pytest.param(stack, patched, case, id=f"{stack.name}-{'patched' if patched else 'pristine'}-{case.id}")
    for stack in STACKS
    for patched in (False, True)
    for case in matrix(stack.name, patched)
]

_RESULTS = GroupedReports()


def result(
    request: pytest.FixtureRequest, wheel_tree: Any, stack: simulation.SglangStack, patched: bool, case: Case
) -> dict[str, Any]:
    """The report of ``case``; the first call for a (stack, patched, GPU) runs all the
    selected cases of that triple in one child."""
    def run(cases: list[Case]) -> list[dict[str, Any]]:
        return simulation.run(wheel_tree, stack, patched=patched, cases=[c.request() for c in cases], gpu=case.gpu)

    return _RESULTS.report(request, case, run, stack=stack, patched=patched)


def test_every_sglang_stack_is_simulated() -> None:
    """The stacks come from patches/stacks.toml: at least the three releases pinned today."""
    names = {s.name for s in STACKS}
    assert {"sglang-0.5.9", "sglang-0.5.10.post1", "sglang-0.5.11"} <= names, names


def check_measured_pristine(outcome: Outcome, report: dict[str, Any]) -> None:
    """A release measured pristine before its stack (0.5.12.post1: every family but the NSA
    ones traces): its pristine side does what its row says, the release's own piecewise
    decision included (NSA models are traced as if enforced)."""
    assert report["piecewise_by_default"] is (not outcome.piecewise_off), describe(report)
    if outcome.error:
        assert not report["ok"], describe(report)
        text = report.get("error_text", "") + report.get("traceback", "")
        assert outcome.error in report.get("error_text", "") and outcome.where in text, describe(report)
        return
    assert report["ok"] and report["graph_breaks_piecewise"] == 0, describe(report)
    assert report["piecewise_runner"] == "PiecewiseCudaGraphRunner", describe(report)


@pytest.mark.parametrize(("stack", "patched", "case"), PARAMS)
def test_whole_model(
    request: pytest.FixtureRequest, wheel_tree: Any, stack: simulation.SglangStack, patched: bool, case: Case
) -> None:
    report = result(request, wheel_tree, stack, patched, case)
    assert report["torch_cuda"] == simulation.simulated_cuda(stack, case.gpu), describe(report)  # the stack's torch
    assert report["stage"] != "build", describe(report)
    for name, value in expect(stack.sglang, case.family, families.ROWS[case.family]).items():
        assert report.get(name) == value, (name, describe(report))
    measured = PRISTINE_OF_STACKS_TABLE.row(stack.sglang)
    if not patched and measured is not None:
        check_measured_pristine(measured.families[case.family], report)
        return
    if not patched:
        assert not report["ok"], describe(report)
        known = [f for f in EARLIER_FAILURES if f.matches(stack, case, report)]
        assert report["stage"] == (known[0].stage if known else "init_piecewise_cuda_graphs"), describe(report)
        seed = any(SEED_ERROR in e for e in report["error_chain"]) and "allocate_lock" in report["error_text"]
        if case.family in NSA:
            assert seed or known or any(f.matches(report) for f in NSA_PRISTINE_FAILURES), describe(report)
            return
        assert report["error"].startswith("torch._dynamo.exc."), describe(report)
        assert seed or known, describe(report)
        return
    assert report["ok"], describe(report)
    assert report["piecewise_runner"] == "PiecewiseCudaGraphRunner", describe(report)
    if case.cuda_graph:
        assert report["decode_graph_runner"] == "CudaGraphRunner", describe(report)
    if case.family in NSA:
        # 0.5.10+: the decode runner's eager forwards enter sglang's own torch.compile
        # regions of the NSA indexer (not fullgraph), which break; none in piecewise.
        assert report["graph_breaks_piecewise"] == 0, describe(report)
        assert_nsa(stack, report)
    else:
        assert report["graph_breaks"] == 0, describe(report)
    assert report["graphs"] and report["captures"] > 0, describe(report)
    moe = families.ROWS[case.family]["kind"] == "moe"
    for pieces in report["graphs"]:
        captured = [op for p in pieces if not p["split"] for op in p["ops"]]
        split = [op for p in pieces if p["split"] for op in p["ops"]]
        assert FP4_QUANTIZE in captured and FP4_GEMM in captured, pieces
        assert FP4_QUANTIZE not in split and FP4_GEMM not in split, pieces
        assert ATTENTION in split and ATTENTION not in captured, pieces
        if moe:
            assert MOE in captured, pieces
