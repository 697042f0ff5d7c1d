"""The server's graph start-up of a built case (child side): decode CUDA graphs, then
sglang's piecewise runner with every ``split_graph`` observed; :func:`capture` returns
the trace report (pieces, ops, kernels, graph breaks, replay, collectives)."""

from __future__ import annotations

import ast
import collections
import inspect
import sys
import textwrap
from typing import Any

from harness.models import collectives, interpreter, stand_ins
from harness.models.batch_forwards import (
    eager_forwards,
    prefill_graph_runner,
    replay,
    speculative_prefill,
)
from harness.models.case_errors import error_report
from harness.models.fake_device import fake_mode, host_tensors_real
from harness.models.model_build import Built

# The fp4 ops the series route SM120 calls through, and sglang's fp4 GEMM op.
FP4_OPS = ("sglang.flashinfer_fp4_quantize", "sglang.fp4_gemm")
SPLIT_OP_PREFIXES = ("sglang.",)
# sglang's collective ops that are not split ops: run eagerly, their body runs (the
# GroupCoordinator's path to a stand-in kernel); inplace_all_reduce is a split op.
COLLECTIVE_OPS = ("sglang.outplace_all_reduce", "sglang.reg_all_gather_into_tensor", "sglang.reg_reduce_scatter_tensor")
COLLECTIVE_OP_CALLS: list[str] = []
# Compiled-kernel namespaces a piece may call (recorded per piece as "kernels").
KERNEL_PREFIXES = ("deep_gemm.", "sgl_kernel.")


def _observe_split_graph(graphs: list[list[dict[str, Any]]]) -> None:
    """Record every split sglang's SGLangBackend makes (calls the real split_graph)."""
    from sglang.srt.compilation import backend

    real = backend.split_graph
    if getattr(real, "_observed", False):
        real = real._real  # type: ignore[attr-defined]

    def split_graph(graph: Any, ops: Any) -> Any:
        split_gm, items = real(graph, ops)
        pieces = []
        for item in items:
            nodes = [n for n in item.graph.graph.nodes if n.op == "call_function"]
            calls = [str(n.target) for n in nodes]
            pieces.append(
                {
                    "name": item.submod_name,
                    "split": bool(item.is_splitting_graph),
                    "ops": [t for t in calls if t.startswith(SPLIT_OP_PREFIXES)],
                    "kernels": sorted({t for t in calls if t.startswith(KERNEL_PREFIXES)}),
                    # The path each out-of-place all-reduce was traced with ("ca": custom
                    # all-reduce, "pynccl", ...): GroupCoordinator.all_reduce decides it.
                    "all_reduce_methods": [
                        str(n.kwargs.get("outplace_all_reduce_method", n.args[2] if len(n.args) > 2 else None))
                        for n in nodes if str(n.target) == "sglang.outplace_all_reduce"
                    ],
                }
            )
        graphs.append(pieces)
        return split_gm, items

    split_graph._observed = True  # type: ignore[attr-defined]
    split_graph._real = real  # type: ignore[attr-defined]
    backend.split_graph = split_graph


def init_piecewise_cuda_graphs(runner: Any) -> None:
    """The release's piecewise runner for ``runner``: ``init_piecewise_cuda_graphs`` from
    0.5.6; up to 0.5.5.post3 the last statement of ``ModelRunner.__init__`` builds it (its
    ``if self.server_args.enable_piecewise_cuda_graph ...`` block), which runs here as the
    release's own code, compiled from its file at its lines (``__init__``'s other work is
    the harness's :func:`model_build.model_runner`)."""
    if hasattr(runner, "init_piecewise_cuda_graphs"):
        runner.init_piecewise_cuda_graphs()
        return
    init = type(runner).__init__
    lines, start = inspect.getsourcelines(init)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    block = next(node for node in ast.walk(tree)
                 if isinstance(node, ast.If) and "enable_piecewise_cuda_graph" in ast.unparse(node.test))
    module = ast.Module(body=[block], type_ignores=[])
    ast.increment_lineno(module, start - 1)
    code = compile(module, inspect.getsourcefile(init) or "<ModelRunner.__init__>", "exec")
    exec(code, {**vars(sys.modules[init.__module__]), "self": runner})


def split_ops() -> list[str]:
    """The ops the release's piecewise backend splits the graph at: a module list from
    0.5.8 (``compilation_config.SPLIT_OPS``) and up to 0.5.6.post2 (``backend.SPLIT_OPS``),
    a list on each ``CompilationConfig`` in 0.5.7, and 0.5.4.x's ``backend.py`` passes
    ``["sglang.unified_attention_with_output"]`` to ``split_graph`` as a literal."""
    from sglang.srt.compilation import compilation_config

    if hasattr(compilation_config, "SPLIT_OPS"):
        return list(compilation_config.SPLIT_OPS)
    from sglang.srt.compilation import backend

    if hasattr(backend, "SPLIT_OPS"):
        return list(backend.SPLIT_OPS)
    config = compilation_config.CompilationConfig(capture_sizes=[])
    return list(getattr(config, "split_ops", ["sglang.unified_attention_with_output"]))


def init_cuda_graphs(runner: Any, decode: bool) -> dict[str, Any]:
    """sglang 0.5.14+ ``ModelRunner.init_cuda_graphs``: the eager runner, the prefill graphs
    (tc_piecewise: torch.compile, then capture), then the decode graphs if on.  What it
    started: the prefill runner's backend (``piecewise_runner``), the decode runner."""
    from sglang.srt.model_executor.runner.eager_runner import EagerRunner

    from fp4graph.verify import simulate

    try:  # 0.5.16+: capture_cuda_graphs sizes the runners' shared logits buffer first
        from sglang.srt.model_executor.graph_shared_output import GraphSharedOutput
    except ImportError:
        pass
    else:  # model_runner_components/cuda_graph_setup.py:83 (0.5.16), :99 (0.5.18)
        runner.graph_shared_output = GraphSharedOutput.create_for_model_runner(runner)
    runner.eager_runner = EagerRunner(runner)
    _host_tensors_real_in_dummy_batch()
    with simulate.compiling():
        runner.init_prefill_cuda_graph()
    pcg = prefill_graph_runner(runner)
    out: dict[str, Any] = {"piecewise_runner": type(pcg.backend).__name__ if pcg else None}
    runner.decode_cuda_graph_runner = None
    runner.graph_mem_usage = 0
    if decode:
        runner.init_decode_cuda_graph()
        out["decode_graph_runner"] = type(runner.decode_cuda_graph_runner).__name__
    return out


def _host_tensors_real_in_dummy_batch() -> None:
    """The prefill runner's dummy batch (``capture_prepare``, run eagerly) makes its host
    tensors as real ones (:func:`fake_device.host_tensors_real`), as on a GPU server."""
    from sglang.srt.model_executor.runner.prefill_cuda_graph_runner import PrefillCudaGraphRunner

    real = PrefillCudaGraphRunner.capture_prepare
    if getattr(real, "_host_tensors_real", False):
        return

    def capture_prepare(self: Any, num_tokens: int) -> Any:
        with host_tensors_real():
            return real(self, num_tokens)

    capture_prepare._host_tensors_real = True  # type: ignore[attr-defined]
    PrefillCudaGraphRunner.capture_prepare = capture_prepare


def capture(built: Built) -> dict[str, Any]:
    """The server's graph start-up: decode CUDA graphs (if on), then piecewise (0.5.14+: as
    the release starts them, :func:`init_cuda_graphs`)."""
    import torch
    from torch._dynamo.utils import counters

    from fp4graph.verify import simulate

    graphs: list[list[dict[str, Any]]] = []
    counters.clear()
    torch._dynamo.reset()
    runner = built.runner
    result: dict[str, Any] = {
        "case": {k: v for k, v in built.case.items() if k != "family"} | {"family": built.case["family"]["name"]},
        "moe_runner_backend": built.moe_runner_backend,
        "attention_backend": built.server_args.attention_backend,
        "quant_methods": sorted(set(built.quant_methods.values())),
        "num_fused_shared_experts": getattr(built.model, "num_fused_shared_experts", None),
        "device": [torch.cuda.get_device_name(), list(torch.cuda.get_device_capability())],
        "speculative_algorithm": getattr(built.server_args, "speculative_algorithm", None),
        "ok": True,
        "stage": None,
        "piecewise_by_default": built.piecewise_by_default,
        "default_prefill_backend": built.default_prefill_backend,
    }
    if built.nsa:
        result["nsa"] = nsa_report(built)
    if built.case.get("report_shapes"):
        result["param_shapes"] = param_shapes(built.model, built.case["report_shapes"])
    try:
        _observe_split_graph(graphs)
        split_op_names = split_ops()
    except Exception as exc:
        # The release imports its piecewise backend in the piecewise runner's first compile
        # (0.5.5.post2 compilation/compile.py:140): an error there is that stage's.
        return {**result, "ok": False, "stage": "init_piecewise_cuda_graphs", "graphs": graphs, **error_report(exc)}
    result["split_ops_run"] = stand_ins.run_split_op_bodies(split_op_names)
    result["collective_ops_run"] = stand_ins.run_split_op_bodies(list(COLLECTIVE_OPS), COLLECTIVE_OP_CALLS)
    stage = "init_device_graphs"
    breaks_before_piecewise = 0
    try:
        with fake_mode():
            if hasattr(runner, "init_prefill_cuda_graph"):  # 0.5.14+
                stage = "init_cuda_graphs"
                result.update(init_cuda_graphs(runner, built.case.get("cuda_graph", True)))
            else:
                if built.case.get("cuda_graph", True):
                    runner.init_device_graphs()
                    result["decode_graph_runner"] = type(runner.graph_runner).__name__ if runner.graph_runner else None
                breaks_before_piecewise = sum(counters["graph_break"].values())
                stage = "init_piecewise_cuda_graphs"
                with simulate.compiling():
                    init_piecewise_cuda_graphs(runner)
                result["piecewise_runner"] = (
                    type(runner.piecewise_cuda_graph_runner).__name__ if runner.piecewise_cuda_graph_runner else None
                )
            if built.case.get("replay_tokens") and prefill_graph_runner(runner):
                stage = "replay"
                mark = len(collectives.LOG)
                result["replay"] = replay(built, built.case["replay_tokens"])
                result["replay"]["collectives"] = [c.key() for c in collectives.LOG[mark:]]
                if built.case.get("speculative_prefill"):
                    stage = "speculative_prefill"
                    result["speculative_prefill"] = speculative_prefill(built, built.case["replay_tokens"])
                if built.server_args.tp_size > 1:
                    stage = "eager"
                    result["eager"] = eager_forwards(built, built.case["replay_tokens"],
                                                     result["replay"]["static_tokens"])
    except Exception as exc:
        result.update(ok=False, stage=stage, **error_report(exc))
    result["graph_breaks"] = sum(counters["graph_break"].values())
    # Breaks before the piecewise runner starts come from torch.compile regions the
    # decode CUDA graph runner's eager forwards enter (not fullgraph); the piecewise
    # compile is fullgraph=True, so a break there is an error as well.
    result["graph_breaks_piecewise"] = result["graph_breaks"] - breaks_before_piecewise
    result["graph_break_reasons"] = [str(k)[:300] for k in counters["graph_break"]][:10]
    result["graphs"] = graphs
    result["kernel_calls"] = dict(sorted(collections.Counter(stand_ins.KERNEL_CALLS).items()))
    result["triton_launches"] = dict(sorted(collections.Counter(stand_ins.TRITON_LAUNCHES).items()))
    result["split_op_calls"] = dict(sorted(collections.Counter(stand_ins.SPLIT_OP_CALLS).items()))
    from torch._dynamo.utils import guard_failures

    result["recompile_reasons"] = [str(r)[:500] for rs in guard_failures.values() for r in rs][:10]
    result["captures"] = len(stand_ins.CAPTURES)
    if built.server_args.tp_size > 1:
        result["parallel"] = collectives.report()
        result["collectives"] = dict(collections.Counter(
            f"{c.phase}:{c.via}.{c.kind}" for c in collectives.LOG))
        result["collective_op_calls"] = dict(collections.Counter(COLLECTIVE_OP_CALLS))
    result["jit_modules"] = sorted(set(interpreter.STATE.get("jit_built", []))) + sorted(set(stand_ins.JIT_BUILT))
    if interpreter.STATE.get("cuda_home"):
        result["flashinfer_toolkit"] = stand_ins.flashinfer_toolkit()
    return result


def param_shapes(model: Any, suffixes: list[str]) -> dict[str, Any]:
    """Shape and dtype of the first parameter or buffer whose name ends with each suffix
    (``None`` where the model has none): what this rank holds."""
    tensors = dict(model.named_parameters())
    tensors.update(dict(model.named_buffers()))
    out: dict[str, Any] = {}
    for suffix in suffixes:
        name = next((n for n in tensors if n.endswith(suffix)), None)
        t = tensors.get(name) if name else None
        out[suffix] = None if t is None else [list(map(int, t.shape)), str(t.dtype).removeprefix("torch.")]
    return out


def nsa_report(built: Built) -> dict[str, Any]:
    """What sglang chose for an NSA (DSA) model on the simulated SM120."""
    args = built.server_args
    backend = built.runner.attn_backend
    return {
        "backend": type(backend).__name__,
        "prefill": getattr(args, "nsa_prefill_backend", getattr(args, "dsa_prefill_backend", None)),
        "decode": getattr(args, "nsa_decode_backend", getattr(args, "dsa_decode_backend", None)),
        "kv_cache_dtype": args.kv_cache_dtype,
        "page_size": args.page_size,
        "kv_pool": type(built.runner.token_to_kv_pool).__name__,
        "indexers": sum(1 for _, m in built.model.named_modules() if type(m).__name__ == "Indexer"),
    }
