"""Whole NVFP4 models under sglang's piecewise CUDA graph runner, on a simulated SM12x GPU.

Child side: imported inside the interpreter :mod:`simulation` starts, with the
stack's sglang, flashinfer and sgl_kernel (Python only) trees first on the path.

What runs is sglang's own code, end to end, for the release on the path:

* ``ServerArgs`` (its SM120 defaults: attention backend, MoE runner backend,
  piecewise capture sizes), ``ModelConfig``, the quantization config read from the
  family's ``config.json`` (ModelOpt NVFP4);
* the parallel state (``init_distributed_environment``, ``initialize_model_parallel``,
  ``initialize_dp_attention``) over gloo, as ``ModelRunner.init_torch_distributed``
  sets it up (``set_custom_all_reduce``, the P2P check as ``--enable-p2p-check``
  says): a world of size 1, or for a tensor-parallel case (``tp_size``) one process per
  rank (:func:`run_ranks`, forks of the case) joined by a real gloo world, sglang's
  ``GroupCoordinator`` s choosing every collective path (custom all-reduce, pynccl,
  torch.distributed); its host collectives run outside FakeTensorMode; and the MoE
  config (``initialize_moe_config``);
* the model class, built by sglang's loader for ``--load-format dummy``
  (``DummyModelLoader``: create_weights, ``process_weights_after_loading``, dummy
  weights) on the host, then every tensor swapped for a fake CUDA tensor of the same
  shape, stride and dtype (aliases kept);
* ``ModelRunner.init_device_graphs`` (the decode ``CudaGraphRunner``: eager decode
  forwards and captures) when the start order has CUDA graphs on, then
  ``ModelRunner.init_piecewise_cuda_graphs``: the release's own
  ``PiecewiseCudaGraphRunner`` (its module, ``install_torch_compiled`` arguments,
  ForwardBatch, forward context, capture sizes largest first, warm-up and capture
  runs) with sglang's ``SGLangBackend`` (``split_graph``, per-piece compile,
  ``CUDAPiecewiseBackend``).  ``split_graph`` is observed (called through).

Stand-ins, and only these (tests/harness/models/stand_ins.py):

1. the device: CPU torch answers as a CUDA 12.8 build on RTX PRO 6000s (SM120), or on
   a DGX Spark's GB10 (SM121: 48 SMs, unified memory, ``is_integrated``)
   (``fp4graph.verify.simulate``), one GPU per rank of the case, the rank's current; an
   ``nvidia-smi`` on PATH answering the same (a GB10's answers ``[N/A]`` for its memory,
   which it shares with the CPU); whether the device runs Triton is asked once while it
   is visible;
2. the CUDA runtime: streams, events, ``torch.cuda.graph`` / ``CUDAGraph`` (the
   captured body runs once on fake tensors), synchronize, memory queries, the
   device RNG state Dynamo saves; ``torch.tensor(..., device="cuda")``, Python
   indexing, ``Tensor.copy_`` and ``~`` of fake CUDA tensors as the aten ops they
   are (a CPU build refuses their CUDA device guards); ``Tensor.cuda()`` is the
   identity while the model is built on the host;
3. the compiled libraries of the pinned sgl-kernel wheel: ``common_ops``, FA3's
   ``flash_ops``, FlashMLA's ``flashmla_ops`` and DeepGEMM's ``deep_gemm_cpp``: the
   schemas of the release (tests/harness/models/data/*.json) defined with torch.library and
   Meta kernels (no-op for ops writing into ``Tensor!`` outputs, shapes from the C++
   source for ops returning tensors, the device's answer for ops without tensor
   arguments; a fake sglang registers itself replaces the Meta kernel); the Python
   packages ``sgl_kernel`` and ``deep_gemm`` are the pinned wheel's own; from sglang
   0.5.12 DeepGEMM is its own wheel (sgl-deep-gemm, a tvm-ffi module): its Python is
   the pinned wheel's, its compiled ``_C`` a module of functions recorded like the ops
   above (``stand_ins.TvmFfiDeepGemm``: same shapes, untraceable as a tvm-ffi function is);
4. JIT-compiled kernels: FlashInfer's JIT build/load and cubin downloads
   (tests/flashinfer stand-ins: no-op kernels, the fused-MoE runner object),
   sglang.jit_kernel's ``tvm_ffi.cpp.load_inline`` / ``load`` (no-op kernels), Triton
   kernels launched eagerly on fake tensors (recorded, not run; traced launches are
   Triton HOPs), the CuTe DSL's ``cute.compile`` (nvidia-cutlass-dsl, where installed:
   FlashInfer 0.6.8's norm kernels; no-op kernels), and Inductor's code generation for the ``torch.compile`` regions
   sglang runs eagerly (their captured graph runs as traced);
5. the attention kernels: for GQA / MLA families an ``AttentionBackend`` subclass
   returning outputs of the real shape (its metadata and CUDA-graph hooks do
   nothing); DSA (NSA) families run sglang's own ``NativeSparseAttnBackend`` as
   ``ModelRunner._get_attention_backend`` builds it for the server arguments (its
   kernels are those of 3 and 4);
6. the memory pools: ``req_to_token_pool``, ``token_to_kv_pool`` and its allocator
   (sizes, fake KV buffers); DSA (NSA) families get sglang's ``ReqToTokenPool`` and
   ``NSATokenToKVPool`` (built with ``init_memory_pool``'s arguments), only the
   allocator is a stand-in;
7. the parts of ``ModelRunner.__init__`` that need a GPU (distributed init over
   NCCL, memory profiling): the runner is ``ModelRunner.__new__`` with the
   attributes ``__init__`` would set, from the real objects above;
8. device memory has no data: every device tensor is a fake (FakeTensorMode with a
   ShapeEnv), so a host read of a device value (``.item()``) is an unbacked symbol;
   Dynamo ignores that mode's own logger (torch 2.9 inlines the mode and would break
   the graph at its ``log.debug``: :func:`_ignore_fake_mode_logging`);
   a split op or one of sglang's collective ops (``outplace_all_reduce`` & co.) called
   eagerly (between captured pieces, in a piece's warm-up or capture run, in an eager
   forward) runs the CUDA body sglang registered for it, as on a GPU, instead of the
   fake FakeTensorMode would answer;
   the collective kernels (tests/harness/models/collectives.py): NVML's topology (a PCIe box,
   no NVLink), libcudart's allocations and IPC handles, libnccl under sglang's
   ``PyNcclCommunicator``, sgl_kernel's custom all-reduce ops and ``torch.distributed``
   on the device group; each collective they run goes through the gloo world on
   placeholders of its size (the ranks check they agree first), and a CUDA graph
   replays the collectives it captured; a rank of a world whose other ranks are not
   run (``processes: 1``, the full-size cases at ``--tp 8``) has torch's
   FakeProcessGroup for them (their collectives do nothing) and sglang's message-queue
   broadcaster off (``SGLANG_USE_MESSAGE_QUEUE_BROADCASTER=false``: no reader process);
9. import-only: torchvision (no CPU build for this torch) and ``flashinfer.comm``
   (loads libcudart at import; multi-GPU all-reduce only), inert modules.

Installed packages (``prepare(record, installed=True)``: ``nox -s install``'s simulation
step, :func:`simulation.run_installed`): the child is the interpreter of a venv where the
stack was installed as users install it, with nothing of ours on its path but the harness
(``tests/`` and ``tests/harness``: :data:`simulation.CHILD_PATH`) and fp4graph's ``src/``; sglang, FlashInfer (with the real flashinfer-cubin),
sgl-kernel's Python, transformers, torch are the venv's.  The same stand-ins, plus one:
sgl-kernel's loader does not load the wheel's compiled ``common_ops`` (CUDA kernels; 3
above takes its place, as it does beside the Python-only tree).

Nothing of sglang's model, layer, quantization, MoE, compilation or runner code is
replaced, nor FlashInfer's Python.

API (for other tests, e.g. which FlashInfer modules a model kind requests)::

    from harness.models import modelsim
    modelsim.prepare()                       # before sglang is imported
    built = modelsim.build(case)             # in a forked process: see run_cases
    built.model, built.runner, built.server_args
    built.quant_methods                       # {module name: quant method class name}
    built.moe_runner_backend                  # sglang's resolved MoE runner backend
    modelsim.capture(built)                  # the runner(s); returns the trace report

``case`` is a dict: ``family`` (a row of tests/harness/models/families.py, as JSON),
``moe_runner_backend`` ("auto" or "flashinfer_cutlass"), ``cuda_graph`` (True: the
default server, decode CUDA graphs captured before piecewise compile; False:
``--disable-cuda-graph``) and optional ``server_args`` overrides; ``replay_tokens``
(a padded replay after capture), ``tp_size`` and ``processes`` (1: rank 0 only),
``report_shapes`` (parameter name suffixes whose per-rank shapes to report),
``speculative_prefill`` (hand the runner the EAGLE target prefill) and ``probe``
(``"all_reduce_paths"``: only the parallel state, probed).
:func:`run_cases` runs each case in a fork of the prepared interpreter, so no case
sees another's warm caches.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import inspect
import json
import os
import pathlib
import socket
import sys
import tempfile
import traceback
from collections.abc import Iterator
from typing import Any

from harness.models import collectives, stand_ins

# The fp4 ops the series route SM120 calls through, and sglang's fp4 GEMM op.
FP4_OPS = ("sglang.flashinfer_fp4_quantize", "sglang.fp4_gemm")
SPLIT_OP_PREFIXES = ("sglang.",)
# sglang's collective ops that are not split ops: run eagerly, their body runs (the
# GroupCoordinator's path to a stand-in kernel); inplace_all_reduce is a split op.
COLLECTIVE_OPS = ("sglang.outplace_all_reduce", "sglang.reg_all_gather_into_tensor", "sglang.reg_reduce_scatter_tensor")
COLLECTIVE_OP_CALLS: list[str] = []
# Compiled-kernel namespaces a piece may call (recorded per piece as "kernels").
KERNEL_PREFIXES = ("deep_gemm.", "sgl_kernel.")

_STATE: dict[str, Any] = {}


def prepare(record_path: str | None = None, gpu_name: str = "sm120", *, installed: bool = False) -> None:
    """Simulate the device (``gpu_name``: a key of ``fp4graph.verify.simulate.GPUS``) and
    install every stand-in; import sglang's model registry. ``installed``: sglang and its
    dependencies are this venv's (see the docstring)."""
    from fp4graph.verify import simulate

    gpu = simulate.GPUS[gpu_name]
    _STATE["gpu"] = gpu
    simulate.install(gpu)
    import torch

    tmp = tempfile.mkdtemp(prefix="fp4graph-models-")
    _STATE["tmp"] = tmp
    os.environ.setdefault("SGLANG_CACHE_DIR", os.path.join(tmp, "sglang-cache"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tmp, "inductor"))
    stand_ins.install_cuda_runtime(gpu.total_memory)
    stand_ins.install_host_collectives()
    collectives.install_nvml()
    stand_ins.install_nvidia_smi(tmp, gpu)
    record = json.loads(pathlib.Path(record_path or os.environ["FP4GRAPH_SGL_KERNEL_RECORD"]).read_text())
    stand_ins.install_sgl_kernel_ops(record)
    stand_ins.import_deep_gemm(tmp)
    import sgsim

    sys.meta_path.insert(0, sgsim._StubFinder("flashinfer.comm"))
    try:
        import torchvision  # noqa: F401
    except Exception:
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        sys.meta_path.insert(0, sgsim._StubFinder("torchvision"))
        import importlib

        auto = importlib.import_module("transformers.models.auto.image_processing_auto")
        sys.modules["transformers"].AutoImageProcessor = auto.AutoImageProcessor
    with stand_ins.no_compiled_sgl_kernel() if installed else contextlib.nullcontext():
        import sgl_kernel  # noqa: F401  (the real Python package over the stand-in library)

    _STATE["jit_built"] = stand_ins.install_flashinfer_jit(os.path.join(tmp, "flashinfer"))
    stand_ins.install_cute_dsl_compiler()
    stand_ins.install_tvm_ffi_compiler()
    stand_ins.install_triton_launcher()
    stand_ins.record_cuda_bodies()
    stand_ins.install_inductor_codegen()
    stand_ins.install_fake_cuda_indexing()
    # Whether the device runs Triton is asked once and cached: ask while the simulated
    # GPU is visible (it is hidden while Dynamo compiles, see simulate.compiling).
    import torch.utils._triton

    torch.utils._triton.has_triton.cache_clear()
    torch.utils._triton.has_triton()
    torch.set_num_threads(1)
    # What the scheduler imports before a model runner exists.
    import sglang.srt.model_executor.model_runner  # noqa: F401

    collectives.install_libraries()
    collectives.install_process_group_collectives()
    from sglang.srt.models.registry import ModelRegistry

    ModelRegistry.get_supported_archs()


def fake_mode() -> Any:
    """The FakeTensorMode every fake CUDA tensor of a case lives in.

    A fake holds no data: a host read of a device value (``.item()``, e.g. the
    decode runner's ``seq_lens.sum().item()``) answers an unbacked symbol, as a
    traced program would see it; branching on one fails loudly."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    if "fake" not in _STATE:
        _STATE["fake"] = FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv(allow_scalar_outputs=True))
        _ignore_fake_mode_logging()
    return _STATE["fake"]


def _ignore_fake_mode_logging() -> None:
    """This mode is on the dispatch stack while Dynamo traces (a GPU run has none there):
    torch 2.9's Dynamo then inlines its ``__torch_dispatch__`` on a ``torch.as_tensor`` of
    a Python scalar and breaks the graph at its ``log.debug``. Its logger, and only its,
    is one Dynamo ignores."""
    import torch._dynamo.config
    from torch._subclasses import fake_tensor

    ignored = getattr(torch._dynamo.config, "ignore_logger_methods", None)
    if ignored is not None:
        ignored.update({fake_tensor.log.debug, fake_tensor.log.isEnabledFor})


# --- building --------------------------------------------------------------------------


@dataclasses.dataclass
class Built:
    model: Any
    runner: Any
    server_args: Any
    model_config: Any
    quant_methods: dict[str, str]
    moe_runner_backend: str
    case: dict[str, Any]
    nsa: bool = False
    piecewise_by_default: bool | None = None


def write_checkpoint_dir(family: dict[str, Any], root: str) -> str:
    """A model directory holding only the family's config.json (dummy weights)."""
    path = pathlib.Path(root) / family["name"]
    path.mkdir(parents=True, exist_ok=True)
    # Atomically: the ranks of a tensor-parallel case read it at once.
    tmp = path / f"config.json.{os.getpid()}"
    tmp.write_text(json.dumps(family["config"], indent=1))
    os.replace(tmp, path / "config.json")
    return str(path)


def server_args_for(case: dict[str, Any], model_path: str) -> Any:
    from sglang.srt.server_args import ServerArgs

    kwargs: dict[str, Any] = {
        "model_path": model_path,
        "quantization": "modelopt_fp4",
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "moe_runner_backend": case.get("moe_runner_backend", "auto"),
        "disable_cuda_graph": not case.get("cuda_graph", True),
        # Few capture sizes keep a case short; the runner's code path is the same.
        "piecewise_cuda_graph_max_tokens": 16,
        "cuda_graph_max_bs": 2,
        "mem_fraction_static": 0.8,
        "tp_size": case.get("tp_size", 1),
    }
    fields = {f.name for f in dataclasses.fields(ServerArgs)}
    # 0.5.9 has piecewise CUDA graph opt-in, 0.5.10+ on by default.
    if "enable_piecewise_cuda_graph" in fields:
        kwargs["enable_piecewise_cuda_graph"] = True
    kwargs.update(case["family"].get("server_args", {}))
    kwargs.update(case.get("server_args", {}))
    return ServerArgs(**{k: v for k, v in kwargs.items() if k in fields})


def piecewise_by_default(case: dict[str, Any], model_path: str) -> bool:
    """Whether the release's own ``ServerArgs`` keeps piecewise CUDA graph on for the case's
    model when the user does not enforce it (the family row's
    ``enforce_piecewise_cuda_graph`` dropped): sglang 0.5.10 ... 0.5.12 turn it off for
    NSA models (``is_piecewise_cuda_graph_disabled_model``), which the cases then trace as
    if it were on."""
    family = dict(case["family"])
    family["server_args"] = {k: v for k, v in family.get("server_args", {}).items()
                             if k != "enforce_piecewise_cuda_graph"}
    args = server_args_for({**case, "family": family}, model_path)
    if hasattr(args, "disable_piecewise_cuda_graph"):  # 0.5.10 ... 0.5.13: on unless turned off
        return not args.disable_piecewise_cuda_graph
    return bool(args.enable_piecewise_cuda_graph)  # 0.5.8 ... 0.5.9: opt-in (server_args_for opts in)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Where the ranks of a tensor-parallel case meet (set by run_ranks before it forks them).
_WORLD = {"rank": 0, "port": 0}
# A rank waits this long for the others in a collective (a rank that failed is killed).
DIST_TIMEOUT_S = 900


def _fake_peers(tp: int) -> str:
    """Rank 0 of ``tp`` in one process: torch's FakeProcessGroup (its collectives do
    nothing) stands in for the other ranks, for every group sglang makes (device and CPU
    groups alike).  Returns the backend name."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=tp)
    # The TP group's shared-memory message queue carries the scheduler's requests to the
    # other ranks' processes and waits for them to attach: there are none (sglang's switch).
    os.environ["SGLANG_USE_MESSAGE_QUEUE_BROADCASTER"] = "false"
    new_group = getattr(dist.new_group, "__wrapped__", dist.new_group)

    def new_fake_group(*args: Any, **kwargs: Any) -> Any:
        kwargs["backend"] = "fake"
        return new_group(*args, **kwargs)

    new_fake_group.__wrapped__ = new_group  # type: ignore[attr-defined]
    dist.new_group = new_fake_group
    return "fake"


def init_parallel_state(server_args: Any, model_config: Any) -> None:
    """The parallel state of a server of ``tp_size`` GPUs, over gloo, as
    ``ModelRunner.init_torch_distributed`` sets it up (custom all-reduce on unless
    ``--disable-custom-all-reduce``; the P2P check skipped unless ``--enable-p2p-check``):
    sglang's own group coordinators, whose NCCL and custom all-reduce communicators run
    on the stand-in libraries of :mod:`collectives`."""
    from sglang.srt.distributed import (
        init_distributed_environment,
        initialize_model_parallel,
        parallel_state,
    )
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.utils import common

    tp = server_args.tp_size
    rank = _WORLD["rank"] if tp > 1 else 0
    port = _WORLD["port"] if tp > 1 else _free_port()
    backend = "gloo"
    if _WORLD.get("fake_peers"):
        backend = _fake_peers(tp)
    parallel_state.set_custom_all_reduce(not server_args.disable_custom_all_reduce)
    if not getattr(server_args, "enable_p2p_check", False):
        common.monkey_patch_p2p_access_check()
    # Host tensors stay real (the unique ids, device ids and IPC handles the ranks
    # exchange over gloo), device allocations are fakes.
    with device_tensors_fake():
        init_distributed_environment(
            backend=backend,
            world_size=tp,
            rank=rank,
            local_rank=rank,
            distributed_init_method=f"tcp://127.0.0.1:{port}",
            timeout=DIST_TIMEOUT_S,
        )
        initialize_model_parallel(tensor_model_parallel_size=tp)
        initialize_dp_attention(server_args=server_args, model_config=model_config)
    try:
        from sglang.srt.layers.moe import initialize_moe_config
    except ImportError:  # pragma: no cover - every supported release has it
        return
    initialize_moe_config(server_args)


# The factories sglang's group coordinators allocate device tensors with.
_FACTORIES = ("empty", "empty_strided", "zeros", "ones", "full", "arange", "rand", "randn", "empty_like",
              "zeros_like", "ones_like", "full_like")


@contextlib.contextmanager
def device_tensors_fake() -> Iterator[None]:
    """Factories called for a CUDA device make fake tensors (:func:`fake_mode`); every
    other tensor is a real host tensor.  Fakes work outside the mode they were made in."""
    import torch
    from torch.overrides import TorchFunctionMode

    factories = {getattr(torch, name) for name in _FACTORIES}

    def on_device(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        device = kwargs.get("device")
        if device is None:
            like = next((a for a in args if isinstance(a, torch.Tensor)), None)
            return like is not None and like.device.type == "cuda"
        return torch.device(device).type == "cuda"

    class DeviceTensorsFake(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            if func in factories and on_device(args, kwargs):
                with fake_mode():
                    return func(*args, **kwargs)
            return func(*args, **kwargs)

    with DeviceTensorsFake():
        yield


@contextlib.contextmanager
def host_is_device() -> Iterator[None]:
    """While the model is built on the host, ``Tensor.cuda()`` keeps tensors there."""
    import torch

    real = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.cuda = real  # type: ignore[method-assign]


def to_fake_cuda(root: Any) -> int:
    """Swap every tensor reachable from ``root`` (parameters, buffers, tensor
    attributes of modules and of the sglang objects they hold) for a fake CUDA
    tensor of the same shape, stride and dtype.  The same tensor maps to the same
    fake (tied weights stay tied).  Returns the number of tensors swapped."""
    import torch

    memo: dict[int, Any] = {}
    seen: set[int] = set()

    def fake(t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, torch._subclasses.fake_tensor.FakeTensor):
            return t
        key = id(t)
        if key not in memo:
            with fake_mode():
                new = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="cuda")
            if isinstance(t, torch.nn.Parameter):
                param = torch.nn.Parameter(new, requires_grad=False)
                param.__dict__.update({k: v for k, v in t.__dict__.items()})
                new = param
            memo[key] = new
        return memo[key]

    def swap(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return fake(value)
        if isinstance(value, list):
            value[:] = [swap(v) for v in value]
            return value
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return tuple(swap(v) for v in value)
        if isinstance(value, dict):
            for k in list(value):
                value[k] = swap(value[k])
            return value
        visit(value)
        return value

    def visit(obj: Any) -> None:
        if id(obj) in seen or isinstance(obj, (type, types_module())):
            return
        module_name = type(obj).__module__ or ""
        if not (isinstance(obj, torch.nn.Module) or module_name.startswith(("sglang", "flashinfer", "sgl_kernel"))):
            return
        seen.add(id(obj))
        if isinstance(obj, torch.nn.Module):
            for name, p in list(obj._parameters.items()):
                if p is not None:
                    obj._parameters[name] = fake(p)
            for name, b in list(obj._buffers.items()):
                if b is not None:
                    obj._buffers[name] = fake(b)
            for child in obj._modules.values():
                if child is not None:
                    visit(child)
        attrs = getattr(obj, "__dict__", None)
        if attrs is None:
            return
        for name, value in list(attrs.items()):
            if name in ("_parameters", "_buffers", "_modules"):
                continue
            attrs[name] = swap(value)

    visit(root)
    return len(memo)


def types_module() -> type:
    import types

    return types.ModuleType


class _Pool:
    """A memory pool stand-in: its size and fake buffers of the real shapes."""

    def __init__(self, **attrs: Any) -> None:
        self.__dict__.update(attrs)


class _KVPool(_Pool):
    """``token_to_kv_pool``: per-layer K/V (or MLA latent) buffers, preallocated
    like sglang's pools, returned by the same accessors."""

    def get_key_buffer(self, layer_id: int) -> Any:
        return self.k_buffer[layer_id - self.start_layer]

    def get_value_buffer(self, layer_id: int) -> Any:
        return self.v_buffer[layer_id - self.start_layer]

    def get_kv_buffer(self, layer_id: int) -> tuple[Any, Any]:
        return self.get_key_buffer(layer_id), self.get_value_buffer(layer_id)

    def set_kv_buffer(self, *args: Any, **kwargs: Any) -> None:
        pass

    def set_mla_kv_buffer(self, *args: Any, **kwargs: Any) -> None:
        pass

    def set_swa_loc(self, loc: Any) -> None:
        pass

    def get_kv_size_bytes(self) -> tuple[int, int]:
        return (0, 0)


def memory_pools(server_args: Any, model_config: Any, dtype: Any) -> tuple[Any, Any, Any]:
    import torch

    size, tokens, context = 64, 256, 4096
    layers = model_config.num_hidden_layers
    if getattr(model_config, "kv_lora_rank", None):
        k_shape = v_shape = (tokens + 1, 1, model_config.kv_lora_rank + model_config.qk_rope_head_dim)
    else:
        heads = model_config.get_num_kv_heads(1)
        k_shape = (tokens + 1, heads, model_config.head_dim)
        v_shape = (tokens + 1, heads, getattr(model_config, "v_head_dim", model_config.head_dim))
    with fake_mode():
        req_to_token = _Pool(
            size=size,
            max_context_len=context,
            device="cuda",
            req_to_token=torch.zeros(size, context, dtype=torch.int32, device="cuda"),
        )
        kv = _KVPool(
            size=tokens,
            page_size=1,
            dtype=dtype,
            store_dtype=dtype,
            device="cuda",
            layer_num=layers,
            start_layer=0,
            end_layer=layers,
            k_buffer=[torch.empty(k_shape, dtype=dtype, device="cuda") for _ in range(layers)],
            v_buffer=[torch.empty(v_shape, dtype=dtype, device="cuda") for _ in range(layers)],
        )
    allocator = _Pool(size=tokens, page_size=1, device="cuda", get_kvcache=lambda: kv)
    return req_to_token, kv, allocator


def dsa_name(module: Any, nsa: str, dsa: str) -> Any:
    """``module.<nsa>``, or its 0.5.13+ name ``<dsa>`` (NSA became DSA in sglang's names)."""
    return getattr(module, nsa) if hasattr(module, nsa) else getattr(module, dsa)


def nsa_memory_pools(runner: Any) -> None:
    """The pools of an NSA (DSA) model, built by sglang's own classes with the arguments
    ``ModelRunnerKVCacheMixin.init_memory_pool`` passes (its sizes: :func:`memory_pools`):
    ``ReqToTokenPool`` and ``NSATokenToKVPool`` (paged latent cache + the indexer's fp8
    k cache with scales); the KV cache dtype from ``ModelRunner.configure_kv_cache_dtype``."""
    from sglang.srt.configs import model_config
    from sglang.srt.mem_cache import memory_pool
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    # sglang 0.5.13 renamed NSA to DSA (PR #23351's release).
    index_head_dim = dsa_name(model_config, "get_nsa_index_head_dim", "get_dsa_index_head_dim")
    token_to_kv_pool = dsa_name(memory_pool, "NSATokenToKVPool", "DSATokenToKVPool")

    size, tokens, context = 64, 4096, 4096
    config = runner.model_config
    runner.configure_kv_cache_dtype()
    runner.start_layer, runner.end_layer = 0, config.num_hidden_layers
    runner.num_effective_layers = config.num_hidden_layers
    with fake_mode():
        runner.req_to_token_pool = ReqToTokenPool(
            size=size, max_context_len=context + 4, device="cuda", enable_memory_saver=False
        )
        runner.token_to_kv_pool = token_to_kv_pool(
            size=tokens,
            page_size=runner.page_size,
            dtype=runner.kv_cache_dtype,
            kv_lora_rank=config.kv_lora_rank,
            qk_rope_head_dim=config.qk_rope_head_dim,
            layer_num=runner.num_effective_layers,
            device="cuda",
            kv_cache_dim=runner.calculate_mla_kv_cache_dim(),
            enable_memory_saver=False,
            start_layer=runner.start_layer,
            end_layer=runner.end_layer,
            index_head_dim=index_head_dim(config.hf_config),
        )
    runner.max_total_num_tokens = tokens
    kv = runner.token_to_kv_pool
    runner.token_to_kv_pool_allocator = _Pool(size=tokens, page_size=runner.page_size, device="cuda",
                                              get_kvcache=lambda: kv)


def nsa_attention_backend(runner: Any) -> Any:
    """sglang's own attention backend for the server arguments (``--attention-backend nsa``,
    with the NSA prefill / decode implementations ServerArgs chose for SM120), built by
    ``ModelRunner._get_attention_backend``; its kernels are the stand-ins'."""
    with fake_mode():
        return runner._get_attention_backend()


def attention_backend(req_to_token_pool: Any = None, token_to_kv_pool: Any = None) -> Any:
    """An AttentionBackend subclass standing in for the attention kernels; it holds the
    runner's pools, as sglang's backends do (0.5.13+ models read the KV pool through the
    forward context's attention backend)."""
    import torch
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend

    class SimulatedAttentionBackend(AttentionBackend):
        """Outputs of the real shape; no kernels, no metadata."""

        def __init__(self) -> None:
            self.calls: list[str] = []
            self.req_to_token_pool = req_to_token_pool
            self.token_to_kv_pool = token_to_kv_pool

        def init_forward_metadata(self, forward_batch: Any) -> None:
            pass

        def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int) -> None:
            pass

        def init_forward_metadata_capture_cuda_graph(self, *args: Any, **kwargs: Any) -> None:
            pass

        def init_forward_metadata_replay_cuda_graph(self, *args: Any, **kwargs: Any) -> None:
            pass

        def get_cuda_graph_seq_len_fill_value(self) -> int:
            return 1

        def _out(self, q: Any, layer: Any) -> Any:
            self.calls.append(type(layer).__name__)
            rows = q.shape[0]
            return torch.empty(rows, layer.tp_q_head_num * layer.v_head_dim, dtype=q.dtype, device=q.device)

        def forward_decode(self, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any, save_kv_cache: bool = True, **kw: Any) -> Any:
            return self._out(q, layer)

        def forward_extend(self, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any, save_kv_cache: bool = True, **kw: Any) -> Any:
            return self._out(q, layer)

    return SimulatedAttentionBackend()


def quant_methods(model: Any) -> dict[str, str]:
    out = {}
    for name, module in model.named_modules():
        method = getattr(module, "quant_method", None)
        if method is not None:
            out[name] = type(method).__name__
    return out


def model_runner(server_args: Any, model_config: Any, model: Any) -> Any:
    """``ModelRunner.__new__`` with the attributes its ``__init__`` sets for this rank."""
    import torch
    from sglang.srt.distributed import get_pp_group, get_tp_group
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    runner = ModelRunner.__new__(ModelRunner)
    req_to_token, kv, allocator = memory_pools(server_args, model_config, model_config.dtype)
    attrs = dict(
        server_args=server_args,
        model_config=model_config,
        model=model,
        device="cuda",
        gpu_id=torch.cuda.current_device(),
        tp_rank=get_tp_group().rank_in_group,
        tp_size=server_args.tp_size,
        pp_rank=0,
        pp_size=1,
        moe_ep_rank=0,
        moe_ep_size=1,
        dp_size=1,
        dp_rank=None,
        attn_cp_size=1,
        attn_cp_rank=0,
        moe_dp_size=1,
        moe_dp_rank=0,
        page_size=server_args.page_size,
        dtype=model_config.dtype,
        is_draft_worker=False,
        is_generation=model_config.is_generation,
        is_multimodal=model_config.is_multimodal,
        is_hybrid_swa=getattr(model_config, "is_hybrid_swa", False),
        is_hybrid_swa_compress=getattr(model_config, "is_hybrid_swa_compress", False),
        use_mla_backend=getattr(model_config, "attention_arch", None) is not None
        and model_config.attention_arch.name == "MLA",
        spec_algorithm=SpeculativeAlgorithm.from_string(server_args.speculative_algorithm),
        req_to_token_pool=req_to_token,
        token_to_kv_pool=kv,
        token_to_kv_pool_allocator=allocator,
        max_total_num_tokens=kv.size,
        attn_backend=attention_backend(req_to_token, kv),
        decode_attn_backend_group=[],
        tp_group=get_tp_group(),
        pp_group=get_pp_group(),
        lora_manager=None,
        forward_pass_id=0,
        eagle_use_aux_hidden_state=False,
        model_is_mrope=False,
        # 0.5.10+
        enable_hisparse=getattr(server_args, "enable_hisparse", False),
        hisparse_coordinator=None,
        token_table=None,
        # 0.5.11
        device_timer=None,
        enable_elastic_ep=False,
        msprobe_debugger=None,
        # 0.5.13: install_canary's answer with the KV canary off (its default)
        canary_manager=None,
    )
    import sglang.srt.model_executor.model_runner as model_runner_module

    if hasattr(model_runner_module, "_UNSET"):  # 0.5.13: resolved on first use
        attrs["_linear_attn_registry_cache"] = model_runner_module._UNSET
    attrs["support_pp"] = "pp_proxy_tensors" in inspect.signature(model.forward).parameters
    runner.__dict__.update(attrs)
    # State ModelRunner.initialize() derives on the way (release methods).
    if hasattr(runner, "maybe_init_ngram_embedding"):
        with fake_mode():
            runner.maybe_init_ngram_embedding()
    return runner


def build(case: dict[str, Any]) -> Built:
    """The model of ``case`` built the way a 1-GPU sglang server builds it."""
    import torch
    from sglang.srt.configs.device_config import DeviceConfig
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader import get_model_loader
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    path = write_checkpoint_dir(case["family"], _STATE["tmp"])
    by_default = piecewise_by_default(case, path)
    server_args = server_args_for(case, path)
    set_global_server_args_for_scheduler(server_args)
    model_config = ModelConfig.from_server_args(server_args)
    init_parallel_state(server_args, model_config)
    load_config = LoadConfig(load_format=server_args.load_format)
    try:
        loader = get_model_loader(load_config, model_config)
    except TypeError:
        loader = get_model_loader(load_config)
    # Built on the host; what the model allocates on the GPU by name (DeepSeek's YaRN
    # rotary cache: device="cuda") is a fake CUDA tensor, as it would be on the device.
    with host_is_device(), torch.device("cpu"), device_tensors_fake():
        model = loader.load_model(model_config=model_config, device_config=DeviceConfig("cpu"))
    to_fake_cuda(model)
    from sglang.srt.configs import model_config as model_configs
    from sglang.srt.layers.moe.utils import get_moe_runner_backend

    runner = model_runner(server_args, model_config, model)
    nsa = dsa_name(model_configs, "is_deepseek_nsa", "is_deepseek_dsa")(model_config.hf_config)
    if nsa:
        nsa_memory_pools(runner)
        runner.attn_backend = nsa_attention_backend(runner)
    return Built(
        nsa=nsa,
        piecewise_by_default=by_default,
        model=model,
        runner=runner,
        server_args=server_args,
        model_config=model_config,
        quant_methods=quant_methods(model),
        moe_runner_backend=str(get_moe_runner_backend()),
        case=case,
    )


# --- capturing -------------------------------------------------------------------------


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


def _error(exc: BaseException) -> dict[str, Any]:
    """The error, its full text, and the chain of causes (Dynamo wraps the first
    untraceable call in the error of an enclosing context manager on some releases)."""
    chain: list[str] = []
    cause: BaseException | None = exc
    while cause is not None and len(chain) < 8:
        first = (str(cause).strip().splitlines() or [""])[0]
        chain.append(f"{type(cause).__module__}.{type(cause).__name__}: {first[:500]}")
        cause = cause.__cause__ or cause.__context__
    return {
        "error": chain[0],
        "error_chain": chain,
        "error_text": "\n".join(str(e)[:6000] for e in _exceptions(exc)),
        "traceback": "".join(traceback.format_exception(exc))[-8000:],
    }


def _exceptions(exc: BaseException) -> list[BaseException]:
    out = []
    cause: BaseException | None = exc
    while cause is not None and len(out) < 8:
        out.append(cause)
        cause = cause.__cause__ or cause.__context__
    return out


def capture(built: Built) -> dict[str, Any]:
    """The server's graph start-up: decode CUDA graphs (if on), then piecewise."""
    import torch
    from torch._dynamo.utils import counters

    from fp4graph.verify import simulate

    graphs: list[list[dict[str, Any]]] = []
    _observe_split_graph(graphs)
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
    }
    if built.nsa:
        result["nsa"] = nsa_report(built)
    if built.case.get("report_shapes"):
        result["param_shapes"] = param_shapes(built.model, built.case["report_shapes"])
    from sglang.srt.compilation.compilation_config import SPLIT_OPS

    result["split_ops_run"] = stand_ins.run_split_op_bodies(list(SPLIT_OPS))
    result["collective_ops_run"] = stand_ins.run_split_op_bodies(list(COLLECTIVE_OPS), COLLECTIVE_OP_CALLS)
    stage = "init_device_graphs"
    breaks_before_piecewise = 0
    try:
        with fake_mode():
            if built.case.get("cuda_graph", True):
                runner.init_device_graphs()
                result["decode_graph_runner"] = type(runner.graph_runner).__name__ if runner.graph_runner else None
            breaks_before_piecewise = sum(counters["graph_break"].values())
            stage = "init_piecewise_cuda_graphs"
            with simulate.compiling():
                runner.init_piecewise_cuda_graphs()
            result["piecewise_runner"] = (
                type(runner.piecewise_cuda_graph_runner).__name__ if runner.piecewise_cuda_graph_runner else None
            )
            if built.case.get("replay_tokens") and runner.piecewise_cuda_graph_runner:
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
        result.update(ok=False, stage=stage, **_error(exc))
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
    result["jit_modules"] = sorted(set(_STATE.get("jit_built", []))) + sorted(set(stand_ins.JIT_BUILT))
    return result


def extend_batch(runner: Any, num_tokens: int, hidden: str = "NULL") -> Any:
    """A prefill (extend) batch of one new request of ``num_tokens`` tokens, as the
    scheduler hands it to ``ModelRunner.forward``: the fields the piecewise runner
    reads (its warm-up batch's), host lengths made from Python data (so the NSA
    backend's metadata code can read them), device tensors fake."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import (
        CaptureHiddenMode,
        ForwardBatch,
        ForwardMode,
    )

    fields = {f.name for f in dataclasses.fields(ForwardBatch)}
    values: dict[str, Any] = dict(
        forward_mode=ForwardMode.EXTEND,
        global_forward_mode=ForwardMode.EXTEND,
        batch_size=1,
        input_ids=torch.zeros(num_tokens, dtype=torch.int64, device="cuda"),
        positions=torch.arange(num_tokens, dtype=torch.int64, device="cuda"),
        req_pool_indices=torch.zeros(1, dtype=torch.int64, device="cuda"),
        seq_lens=torch.tensor([num_tokens], device="cuda"),
        orig_seq_lens=torch.tensor([num_tokens], device="cuda"),
        seq_lens_cpu=torch.tensor([num_tokens]),
        seq_lens_sum=num_tokens,
        req_to_token_pool=runner.req_to_token_pool,
        token_to_kv_pool=runner.token_to_kv_pool,
        attn_backend=runner.attn_backend,
        out_cache_loc=torch.arange(num_tokens, dtype=torch.int64, device="cuda"),
        extend_num_tokens=num_tokens,
        extend_seq_lens=torch.tensor([num_tokens], device="cuda"),
        extend_prefix_lens=torch.tensor([0], device="cuda"),
        extend_start_loc=torch.tensor([0], device="cuda"),
        extend_seq_lens_cpu=[num_tokens],
        extend_prefix_lens_cpu=[0],
        extend_logprob_start_lens_cpu=[num_tokens],
        return_logprob=False,
        capture_hidden_mode=getattr(CaptureHiddenMode, hidden),
    )
    return ForwardBatch(**{k: v for k, v in values.items() if k in fields})


def speculative_prefill(built: Built, num_tokens: int) -> dict[str, Any]:
    """The target model's prefill under speculative decoding (EAGLE / MTP): the EAGLE
    worker asks for every hidden state (``CaptureHiddenMode.FULL``, its
    ``forward_target_extend``).  Whether the piecewise runner takes such a batch, and
    where it does, one padded replay of it (the draft model reads its hidden states)."""
    import torch

    pcg = built.runner.piecewise_cuda_graph_runner
    with fake_mode(), torch.no_grad():
        batch = extend_batch(built.runner, num_tokens, hidden="FULL")
        out: dict[str, Any] = {"can_run": bool(pcg.can_run(batch)),
                               "spec_algorithm": str(built.runner.spec_algorithm)}
        if out["can_run"]:
            output = pcg.replay(batch)
            hidden = output.hidden_states
            out["logits"] = list(map(int, output.next_token_logits.shape))
            out["hidden_states"] = None if hidden is None else list(map(int, hidden.shape))
    return out


def runner_forward_context(runner: Any) -> Any:
    """The context ``ModelRunner._forward_raw`` publishes around every forward (sglang
    0.5.13+: ``forward_context(ForwardContext(attn_backend=...))``, which the model's DSA
    attention reads); nothing on releases without one."""
    try:
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
    except ImportError:
        return contextlib.nullcontext()
    return forward_context(ForwardContext(attn_backend=runner.attn_backend))


def replay(built: Built, num_tokens: int) -> dict[str, Any]:
    """One replay of the captured piecewise graphs for a batch of ``num_tokens`` (not a
    capture size: the runner pads it to the next one), as ``ModelRunner.forward_extend``
    replays them.  Returns the padded size, the output rows, and the kernel calls made
    in the replay with the rows of their first tensor argument."""
    import torch

    pcg = built.runner.piecewise_cuda_graph_runner
    first = len(stand_ins.KERNEL_SHAPES)
    calls = len(stand_ins.SPLIT_OP_CALLS)
    with fake_mode(), torch.no_grad(), runner_forward_context(built.runner):
        batch = extend_batch(built.runner, num_tokens)
        assert pcg.can_run(batch), f"the piecewise runner refuses a {num_tokens}-token extend batch"
        output = pcg.replay(batch)
    kernels: dict[str, list[int]] = {}
    for name, rows in stand_ins.KERNEL_SHAPES[first:]:
        kernels.setdefault(name, []).append(rows)
    return {
        "tokens": num_tokens,
        "static_tokens": min(n for n in pcg.capture_num_tokens if n >= num_tokens),
        "logits_rows": int(output.next_token_logits.shape[0]),
        "logits": [list(map(int, output.next_token_logits.shape)), str(output.next_token_logits.dtype),
                   str(output.next_token_logits.device)],
        "split_op_calls": dict(collections.Counter(stand_ins.SPLIT_OP_CALLS[calls:])),
        "kernel_rows": {k: sorted(set(v)) for k, v in kernels.items()},
    }


def eager_forwards(built: Built, tokens: int, static_tokens: int) -> dict[str, Any]:
    """What an eager forward (``ModelRunner.forward_extend`` with no piecewise runner, the
    server with piecewise off) of this rank gives: for the replay's real batch, the
    logits' shape; for a batch of the padded size, the collectives it runs, in order (the
    replay runs its graphs captured at that size)."""
    import torch

    runner = built.runner
    pcg, runner.piecewise_cuda_graph_runner = runner.piecewise_cuda_graph_runner, None
    out: dict[str, Any] = {}
    try:
        for name, n in (("real", tokens), ("padded", static_tokens)):
            mark = len(collectives.LOG)
            with fake_mode(), torch.no_grad():
                result = runner.forward_extend(extend_batch(runner, n))
            output = result[0] if isinstance(result, tuple) else result
            logits = output.next_token_logits
            out[name] = {
                "tokens": n,
                "logits": [list(map(int, logits.shape)), str(logits.dtype), str(logits.device)],
                "collectives": [c.key() for c in collectives.LOG[mark:]],
            }
    finally:
        runner.piecewise_cuda_graph_runner = pcg
    return out


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


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    tp = case.get("tp_size", 1)
    if tp > 1 and case.get("processes", tp) == 1:  # one rank, the others stood in for
        from fp4graph.verify import simulate

        _WORLD["fake_peers"] = True
        simulate.set_device_count(tp)
        return run_rank(case)
    if tp > 1:
        return run_ranks(case)
    return run_rank(case)


def all_reduce_paths(case: dict[str, Any]) -> dict[str, Any]:
    """Which collective sglang's TP group runs for an all-reduce on this machine (a PCIe
    box of ``tp_size`` GPUs): for a small and a large (above the custom all-reduce's
    ``max_size``) activation, eagerly and inside piecewise CUDA graph mode, as
    ``GroupCoordinator.all_reduce`` decides; nothing else of the model is built."""
    import torch
    from sglang.srt.compilation.piecewise_context_manager import enable_piecewise_cuda_graph
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed import get_tp_group
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    path = write_checkpoint_dir(case["family"], _STATE["tmp"])
    server_args = server_args_for(case, path)
    set_global_server_args_for_scheduler(server_args)
    model_config = ModelConfig.from_server_args(server_args)
    init_parallel_state(server_args, model_config)
    stand_ins.run_split_op_bodies([*COLLECTIVE_OPS, "sglang.inplace_all_reduce"], COLLECTIVE_OP_CALLS)
    group = get_tp_group()
    ca = group.ca_comm
    hidden = model_config.hidden_size
    large_rows = (getattr(ca, "max_size", 8 << 20) // (hidden * 2)) + 16
    out: dict[str, Any] = {"ok": True, "stage": None, "parallel": collectives.report()}
    for size, rows in (("small", 16), ("large", large_rows)):
        for mode in ("eager", "piecewise"):
            mark = len(collectives.LOG)
            with fake_mode():
                x = torch.empty(rows, hidden, dtype=torch.bfloat16, device="cuda")
                with enable_piecewise_cuda_graph() if mode == "piecewise" else contextlib.nullcontext():
                    group.all_reduce(x)
            out[f"{size}/{mode}"] = sorted({c.via for c in collectives.LOG[mark:]})
    return out


def run_rank(case: dict[str, Any]) -> dict[str, Any]:
    if case.get("probe") == "all_reduce_paths":
        try:
            return all_reduce_paths(case)
        except Exception as exc:
            return {"ok": False, "stage": "probe", **_error(exc)}
    try:
        built = build(case)
    except Exception as exc:
        return {"case": {"family": case["family"]["name"]}, "ok": False, "stage": "build", **_error(exc)}
    return capture(built)


def run_ranks(case: dict[str, Any]) -> dict[str, Any]:
    """A tensor-parallel case: one process per rank (forks of this one), each with its GPU
    current, meeting in a gloo world on the host; returns each rank's report under
    ``ranks`` (rank order) and ``ok`` when every rank's is.  A rank that fails or dies
    ends the case: the others, blocked in a collective, are killed."""
    import selectors
    import signal
    import time

    from fp4graph.verify import simulate

    tp = case["tp_size"]
    _WORLD["port"] = _free_port()
    simulate.set_device_count(tp)
    write_checkpoint_dir(case["family"], _STATE["tmp"])  # before the ranks read it
    children: dict[int, tuple[int, int]] = {}  # fd -> (rank, pid)
    for rank in range(tp):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the rank
            os.close(read)
            code = 0
            try:
                _WORLD["rank"] = rank
                simulate.set_device(rank)
                out = run_rank(case)
                if out.get("ok"):  # no rank leaves the world while another still talks to it
                    import torch.distributed as dist

                    dist.barrier()
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                out = {"case": {"family": case["family"]["name"]}, "ok": False, "stage": "child", **_error(exc)}
                code = 1
            with os.fdopen(write, "w") as f:
                f.write(json.dumps(out, default=str))
            os._exit(code)
        os.close(write)
        children[read] = (rank, pid)
    data: dict[int, list[bytes]] = {rank: [] for rank, _ in children.values()}
    done: dict[int, dict[str, Any]] = {}
    selector = selectors.DefaultSelector()
    for fd in children:
        selector.register(fd, selectors.EVENT_READ)
    deadline: float | None = None
    while len(done) < tp:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        events = selector.select(timeout)
        if not events:  # a rank failed and the others did not finish: kill them
            for fd, (rank, pid) in children.items():
                if rank not in done:
                    os.kill(pid, signal.SIGKILL)
                    done[rank] = {"ok": False, "stage": "killed",
                                  "error": f"rank {rank} killed: another rank failed and it did not finish"}
                    selector.unregister(fd)
            break
        for key, _ in events:
            rank, pid = children[key.fd]
            chunk = os.read(key.fd, 1 << 16)
            if chunk:
                data[rank].append(chunk)
                continue
            selector.unregister(key.fd)
            text = b"".join(data[rank]).decode()
            done[rank] = json.loads(text) if text else {"ok": False, "stage": "child",
                                                         "error": f"rank {rank} died without a report"}
            if not done[rank].get("ok") and deadline is None:
                deadline = time.monotonic() + 60
    for fd, (_, pid) in children.items():
        os.waitpid(pid, 0)
        os.close(fd)
    ranks = [done[r] for r in range(tp)]
    failed = next((r for r in ranks if not r.get("ok")), None)
    return {
        "case": {k: v for k, v in case.items() if k != "family"} | {"family": case["family"]["name"]},
        "ok": failed is None,
        "stage": None if failed is None else failed.get("stage"),
        "error": None if failed is None else failed.get("error"),
        "ranks": ranks,
    }


def run_cases(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each case in a fork of this (prepared) interpreter; results in order, each with
    the wall time its case took (``seconds``)."""
    import time

    results = []
    if os.environ.get("FP4GRAPH_MODELS_NO_FORK"):  # debugging: one case, in-process
        return [run_case(case) for case in cases]
    for case in cases:
        start = time.monotonic()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the case
            os.close(read)
            code = 0
            try:
                out = run_case(case)
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                out = {"case": {"family": case["family"]["name"]}, "ok": False, "stage": "child", **_error(exc)}
                code = 1
            with os.fdopen(write, "w") as f:
                f.write(json.dumps(out, default=str))
            os._exit(code)
        os.close(write)
        with os.fdopen(read) as f:
            data = f.read()
        _, status = os.waitpid(pid, 0)
        if not data:
            data = json.dumps({"case": {"family": case["family"]["name"]}, "ok": False, "stage": "child",
                               "error": f"case process died (wait status {status})"})
        results.append(json.loads(data) | {"seconds": round(time.monotonic() - start, 1)})
    return results


def main(request_json: str) -> None:
    request = json.loads(request_json)
    prepare(request.get("record"), request.get("gpu", "sm120"), installed=request.get("installed", False))
    results = run_cases(request["cases"])
    stand_ins.report("MODELS", results)
