"""Child side of the CPU checks: sglang's own argument parsing and weight loading of a cell.

Imported inside a child interpreter that has a stack's sglang and flashinfer trees first on
``sys.path`` and ``tests/harness`` (sgsim) after it.  :func:`main` takes a JSON request
``{"cells": [{"id": ..., "argv": [...], "load": bool}, ...]}``: for every cell, the
launch_server arguments the integration run would pass; it prints one ``RESULT:`` JSON line.

What runs is sglang's code of that release, never a copy:

- ``prepare_server_args(argv)``: its argparse and ``ServerArgs.__post_init__`` (flag
  validation, model-specific adjustments, piecewise auto-disable rules of 0.5.10+);
- 0.5.9: ``ModelRunner.can_run_piecewise_cuda_graph`` (where 0.5.9 and its series decide);
- ``ModelConfig.from_server_args``: the HF config through sglang's ``get_config`` and the
  quantization check against ``hf_quant_config.json`` / ``quantization_config``;
- ``ModelRunner.init_piecewise_cuda_graphs`` on the loaded model, up to the construction
  of the piecewise runner (its class is recorded instead of capturing, which needs a GPU):
  every rule of that release that turns piecewise off, layer collection included;
- the model loader's ``_get_quantization_config`` and ``_initialize_model`` (the model class
  of the checkpoint's architecture, built on the CPU with ``ModelOptFp4Config``), then the
  model's own ``load_weights`` fed by ``DefaultModelLoader._get_all_weights`` (sglang's
  safetensors iterator).

Stand-ins, for what cannot exist on a CPU (each one a device query or a device resource):

- ``sgsim.prepare()``: the simulated SM120 (torch.cuda device queries), inert torchvision /
  sgl_kernel / flashinfer.comm modules for the import chain (see tests/harness/sgsim.py);
- ``torch.cuda.mem_get_info`` and ``utils.common.get_nvgpu_memory_capacity`` (nvidia-smi):
  the memory of the simulated 96 GiB card (ServerArgs sizes its defaults from it);
- ``torch.cuda.Stream``: :class:`HostStream` (the alternate streams models create for
  overlap, never used while loading); ``Tensor.cuda()`` returns the tensor while the model
  is built (``_host_is_the_device``: the model lives in host memory);
- the NSA indexer's ``deep_gemm`` (a CUDA-only package, so sglang holds the ImportError in
  its place): an object with only ``get_num_sms()``, the simulated card's SM count, which
  the indexer reads when it is built;
- the parallel state: sglang's own ``init_distributed_environment`` /
  ``initialize_model_parallel`` on a gloo world of size 1 (the run uses NCCL), with
  ``parallel_state.is_cuda_alike`` answering False meanwhile, so the group coordinators
  keep their tensors on the host.

The load check: every parameter is filled with a sentinel byte pattern, the weights are
loaded, then again with a second pattern; an element equal in both loads was written by the
checkpoint, so every parameter must be fully written.  Byte sums of the NVFP4 weights and
block scales of the model must equal the checkpoint's (nothing loaded twice or dropped).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import socket
import time
import traceback
from typing import Any

import sgsim

PATTERNS = (0x5A, 0xA5)
# Parameters a checkpoint does not provide: the swizzled block scales the NVFP4 MoE methods
# create for process_weights_after_loading (shapes only), and the KV-cache scales that
# ModelOptFp8KVCacheMethod creates (sglang >= 0.5.10 reads a missing kv_cache_scheme as
# "auto"); ModelOpt writes k_scale / v_scale only for an FP8 KV cache, and the method falls
# back to 1.0 for a scale the checkpoint lacks.
NOT_IN_CHECKPOINT = ("_blockscale_swizzled", ".attn.k_scale", ".attn.v_scale",
                     ".attn_mqa.k_scale", ".attn_mqa.v_scale", ".attn_mha.k_scale", ".attn_mha.v_scale")


def _install_stand_ins() -> None:
    sgsim.prepare()
    import torch

    from fp4graph.verify import simulate

    total = simulate.SM120.total_memory

    def mem_get_info(device: Any = None) -> tuple[int, int]:
        return (total - (4 << 30), total)

    torch.cuda.mem_get_info = mem_get_info
    torch.cuda.Stream = HostStream  # type: ignore[misc,assignment]


class HostStream:
    """Stands in for ``torch.cuda.Stream`` (models keep an alternate stream for overlap)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_stream(self, other: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass


def _call(fn: Any, **kwargs: Any) -> Any:
    """``fn(**kwargs)`` with only the keyword arguments this release's ``fn`` accepts."""
    accepted = inspect.signature(fn).parameters
    return fn(**{k: v for k, v in kwargs.items() if k in accepted})


@contextlib.contextmanager
def _host_is_the_device() -> Any:
    """``Tensor.cuda()`` returns the tensor itself: the model is built in host memory."""
    import torch

    cuda = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.cuda = cuda  # type: ignore[method-assign]


def _deep_gemm_sm_count() -> None:
    import types

    from fp4graph.verify import simulate

    try:
        from sglang.srt.layers.attention.nsa import nsa_indexer
    except ImportError:
        return
    if isinstance(getattr(nsa_indexer, "deep_gemm", None), BaseException):
        nsa_indexer.deep_gemm = types.SimpleNamespace(
            get_num_sms=lambda: simulate.SM120.multi_processor_count
        )


_DISTRIBUTED = [False]


def _init_parallel_state(server_args: Any, model_config: Any) -> None:
    from sglang.srt.distributed import parallel_state
    from sglang.srt.layers import dp_attention

    # The group coordinators put their device on cuda:<rank> when the platform is
    # CUDA-like; this world is gloo on the host.  initialize_dp_attention builds one too
    # (its attention-TP group; 0.5.8 puts a tensor on that device in __init__).
    cuda_alike = parallel_state.is_cuda_alike
    parallel_state.is_cuda_alike = lambda: False
    try:
        if not _DISTRIBUTED[0]:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            _call(
                parallel_state.init_distributed_environment,
                backend="gloo", world_size=1, rank=0, local_rank=0,
                distributed_init_method=f"tcp://127.0.0.1:{port}",
            )
            _call(parallel_state.initialize_model_parallel, tensor_model_parallel_size=1)
            _DISTRIBUTED[0] = True
        _call(dp_attention.initialize_dp_attention, server_args=server_args, model_config=model_config)
    finally:
        parallel_state.is_cuda_alike = cuda_alike


def _server_args(argv: list[str]) -> Any:
    from sglang.srt import server_args as sa_module
    from sglang.srt.utils import common

    from fp4graph.verify import simulate

    # nvidia-smi's answer (MiB per GPU; 0.5.9 has no torch fallback when it is missing).
    common.get_nvgpu_memory_capacity = lambda: float(simulate.SM120.total_memory >> 20)

    args = sa_module.prepare_server_args(argv)
    for setter in ("set_global_server_args_for_scheduler", "set_global_server_args"):
        if hasattr(sa_module, setter):
            getattr(sa_module, setter)(args)
            break
    from sglang.srt.layers.moe import utils as moe_utils

    moe_utils.initialize_moe_config(args)
    return args


def _piecewise(args: Any, model_config: Any) -> dict[str, Any]:
    """Whether this release's code would capture piecewise graphs for these arguments."""
    out: dict[str, Any] = {}
    if hasattr(args, "disable_piecewise_cuda_graph"):  # 0.5.10+: decided in ServerArgs
        out["enabled"] = not args.disable_piecewise_cuda_graph
        out["enforce"] = bool(getattr(args, "enforce_piecewise_cuda_graph", False))
        return out
    enabled = bool(args.enable_piecewise_cuda_graph)  # 0.5.9: opt-in, then ModelRunner
    if enabled:
        import types

        from sglang.srt.model_executor.model_runner import ModelRunner

        runner = types.SimpleNamespace(
            is_draft_worker=False, server_args=args, pp_size=args.pp_size, model_config=model_config
        )
        enabled = bool(ModelRunner.can_run_piecewise_cuda_graph(runner))
    out["enabled"] = enabled
    return out


def _function_source(module: str, cls: str, name: str) -> str:
    """The source of ``module.cls.name`` as the release ships it, without importing it."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, module
    text = open(spec.origin, encoding="utf-8").read()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return ast.get_source_segment(text, item) or ""
    raise AssertionError(f"{spec.origin} has no {cls}.{name}")


def _speculative(args: Any, model_config: Any) -> dict[str, Any]:
    """What this release decides for piecewise CUDA graphs with speculative decoding (MTP):
    for the target model's runner and the draft worker's, and whether the target's
    speculative prefill (the EAGLE worker asks for every hidden state,
    ``CaptureHiddenMode.FULL``) replays the piecewise graphs (``PiecewiseCudaGraphRunner
    .can_run`` of a runner captured as the server captures it)."""
    import inspect
    import types

    from sglang.srt.model_executor import model_runner as mr
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode

    out: dict[str, Any] = {"algorithm": args.speculative_algorithm,
                           "draft_is_target": args.speculative_draft_model_path == args.model_path}
    out["target"] = _piecewise(args, model_config)["enabled"]
    if hasattr(mr.ModelRunner, "can_run_piecewise_cuda_graph"):  # 0.5.8, 0.5.9
        draft = types.SimpleNamespace(is_draft_worker=True, server_args=args, pp_size=args.pp_size,
                                      model_config=model_config)
        out["draft"] = bool(args.enable_piecewise_cuda_graph) and bool(
            mr.ModelRunner.can_run_piecewise_cuda_graph(draft))
    else:  # 0.5.10+: ServerArgs decides for both; init_piecewise_cuda_graphs for a draft
        # The MTP draft model as the release defines it: DeepseekModelNextN holds one
        # ``decoder`` layer (no ``layers`` list, which init_piecewise_cuda_graphs looks for).
        from sglang.srt.models import deepseek_nextn

        nextn_layers = "self.layers" in inspect.getsource(deepseek_nextn.DeepseekModelNextN.__init__)
        inner = types.SimpleNamespace(layers=[]) if nextn_layers else types.SimpleNamespace(decoder=None)
        model = types.SimpleNamespace(model=inner)
        out["draft"] = _piecewise_runner(args, model, model_config, draft=True) is not None
    # The EAGLE worker imports the scheduler (setproctitle & co.): read its code instead.
    source = _function_source("sglang.srt.speculative.eagle_worker", "EAGLEWorker", "forward_target_extend")
    prefill_mode = CaptureHiddenMode.FULL if "CaptureHiddenMode.FULL" in source else CaptureHiddenMode.NULL
    runner = types.SimpleNamespace(
        capture_hidden_mode=CaptureHiddenMode.FULL if args.enable_return_hidden_states else CaptureHiddenMode.NULL,
        max_num_tokens=max(args.piecewise_cuda_graph_tokens or [1]),
    )
    batch = types.SimpleNamespace(
        input_ids=[0] * 8, input_embeds=None, replace_embeds=None, return_logprob=False,
        forward_mode=ForwardMode.EXTEND, capture_hidden_mode=prefill_mode,
    )
    out["target_prefill_hidden"] = prefill_mode.name
    out["target_prefill_replays"] = bool(out["target"]) and bool(
        mr.PiecewiseCudaGraphRunner.can_run(runner, batch))
    return out


def _bytes(t: Any) -> Any:
    import torch

    return t.reshape(-1).view(torch.uint8)


def _fill(model: Any, pattern: int) -> None:
    import torch

    with torch.no_grad():
        for p in model.parameters():
            assert p.data.is_contiguous(), "parameters are allocated contiguous"
            _bytes(p.data).fill_(pattern)


def _snapshot(model: Any) -> dict[str, Any]:
    return {n: _bytes(p.data).clone() for n, p in model.named_parameters()}


def _byte_sums(tensors: dict[str, Any]) -> dict[str, int]:
    import torch

    sums = {"nvfp4_weight": 0, "weight_scale": 0}
    for t in tensors.values():
        if t.dtype == torch.uint8:
            sums["nvfp4_weight"] += int(t.to(torch.int64).sum())
        elif t.dtype == torch.float8_e4m3fn:
            sums["weight_scale"] += int(t.view(torch.uint8).to(torch.int64).sum())
    return sums


def _initialize_model(loader_module: Any, model_config: Any, load_config: Any) -> tuple[Any, Any]:
    """The release's ``_initialize_model`` and the quantization config it was built with:
    0.5.9+ take the config from ``_get_quantization_config(model_config, load_config)``;
    0.5.8.x derive it inside (from the model class's packed modules), recorded here."""
    if "quant_config" in inspect.signature(loader_module._initialize_model).parameters:
        quant_config = loader_module._get_quantization_config(model_config, load_config)
        return loader_module._initialize_model(model_config, load_config, quant_config), quant_config
    made: list[Any] = []
    get = loader_module._get_quantization_config

    def recorded(*args: Any, **kwargs: Any) -> Any:
        made.append(get(*args, **kwargs))
        return made[-1]

    loader_module._get_quantization_config = recorded
    try:
        model = loader_module._initialize_model(model_config, load_config)
    finally:
        loader_module._get_quantization_config = get
    return model, made[-1]


def _load(args: Any, model_config: Any) -> dict[str, Any]:
    import torch
    from safetensors.torch import load_file
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.model_loader import loader as loader_module
    from sglang.srt.model_loader.utils import set_default_torch_dtype

    _deep_gemm_sm_count()
    load_config = LoadConfig(load_format=args.load_format)
    model_loader = loader_module.DefaultModelLoader(load_config)
    with set_default_torch_dtype(model_config.dtype), torch.device("cpu"), _host_is_the_device():
        model, quant_config = _initialize_model(loader_module, model_config, load_config)
    written = None
    for pattern in PATTERNS:
        _fill(model, pattern)
        model.load_weights(model_loader._get_all_weights(model_config, model))
        snap = _snapshot(model)
        written = snap if written is None else {n: (written[n] == snap[n]) for n in snap}
    assert written is not None
    unwritten = {
        n: int((~m).sum()) for n, m in written.items() if not bool(m.all())
    }
    params = dict(model.named_parameters())
    loaded = {n: p.data for n, p in params.items() if not n.endswith(NOT_IN_CHECKPOINT)}
    model_sums = _byte_sums(loaded)
    ckpt = {}
    for f in sorted(os.listdir(model_config.model_path)):
        if f.endswith(".safetensors"):
            ckpt.update(load_file(os.path.join(model_config.model_path, f)))
    quant_methods = sorted({type(m.quant_method).__name__ for m in model.modules()
                            if getattr(m, "quant_method", None) is not None})
    runner = _piecewise_runner(args, model, model_config)
    return {
        "piecewise_runner": runner,
        "model_class": type(model).__name__,
        "quant_config": type(quant_config).__name__ if quant_config is not None else None,
        "exclude_modules": list(getattr(quant_config, "exclude_modules", []) or []),
        "quant_methods": quant_methods,
        "params": len(params),
        "unwritten": {n: c for n, c in unwritten.items() if not n.endswith(NOT_IN_CHECKPOINT)},
        "not_in_checkpoint": sorted(n for n in params if n.endswith(NOT_IN_CHECKPOINT)),
        "model_byte_sums": model_sums,
        "checkpoint_byte_sums": _byte_sums(ckpt),
        "num_fused_shared_experts": int(getattr(model, "num_fused_shared_experts", 0) or 0),
    }


def _piecewise_runner(args: Any, model: Any, model_config: Any, draft: bool = False) -> str | None:
    """Run this release's ``ModelRunner.init_piecewise_cuda_graphs`` on the loaded model up
    to the point where it constructs the runner (capture needs the GPU): the runner class it
    would start, or None when it turns piecewise off (flags, GQA layer collection, ...)."""
    import types

    from sglang.srt.model_executor import model_runner as mr

    started: list[str] = []

    class Recorder:
        def __init__(self, runner: Any) -> None:
            started.append(self.name)

    names = [n for n in ("PiecewiseCudaGraphRunner", "BreakableCudaGraphRunner") if hasattr(mr, n)]
    saved = {n: getattr(mr, n) for n in [*names, "get_available_gpu_memory"]}
    for n in names:
        setattr(mr, n, type(n, (Recorder,), {"name": n}))
    mr.get_available_gpu_memory = lambda *a, **k: 90.0  # type: ignore[attr-defined]
    stub = types.SimpleNamespace(
        server_args=args, model=model, model_config=model_config, is_draft_worker=draft,
        pp_size=args.pp_size, device="cuda", gpu_id=0,
    )
    stub.can_run_piecewise_cuda_graph = types.MethodType(  # 0.5.9
        getattr(mr.ModelRunner, "can_run_piecewise_cuda_graph", lambda self: True), stub
    )
    try:
        mr.ModelRunner.init_piecewise_cuda_graphs(stub)
    finally:
        for n, v in saved.items():
            setattr(mr, n, v)
    return started[0] if started else None


FIELDS = (
    "attention_backend", "moe_runner_backend", "disable_cuda_graph", "disable_shared_experts_fusion",
    "kv_cache_dtype", "nsa_prefill_backend", "nsa_decode_backend", "quantization",
)


def run_cell(cell: dict[str, Any]) -> dict[str, Any]:
    args = _server_args(cell["argv"])
    from sglang.srt.configs.model_config import ModelConfig

    model_config = ModelConfig.from_server_args(args)
    _init_parallel_state(args, model_config)
    result: dict[str, Any] = {
        "architecture": model_config.hf_config.architectures[0],
        "args": {f: getattr(args, f, None) for f in FIELDS},
        "piecewise": _piecewise(args, model_config),
    }
    if cell.get("load"):
        result["load"] = _load(args, model_config)
    if cell.get("speculative"):
        result["speculative"] = _speculative(args, model_config)
    return result


def main(request_json: str) -> None:
    """``{"cells": [{"id": ..., "argv": [...], "load": bool}]}`` -> one ``RESULT:`` line,
    ``{id: result}``; a cell that raises reports ``error`` and the child goes on."""
    request = json.loads(request_json)
    _install_stand_ins()
    results: dict[str, Any] = {}
    for cell in request["cells"]:
        start = time.perf_counter()
        try:
            results[cell["id"]] = {**run_cell(cell), "seconds": round(time.perf_counter() - start, 2)}
        except Exception as exc:  # noqa: BLE001 - reported per cell
            results[cell["id"]] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
    print("RESULT:" + json.dumps(results, default=str), flush=True)
