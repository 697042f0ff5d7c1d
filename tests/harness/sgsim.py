"""Child-side helpers: trace SGLang's NVFP4 layers on a simulated SM120 (CPU only).

Imported inside the child interpreter that ``run_python`` starts, with the
sglang and flashinfer trees first on ``sys.path``.  :func:`prepare` must run
before sglang is imported: sglang picks its SM120 fp4 code paths at import.

Everything is traced with sglang's own piecewise entry
(``sglang.srt.compilation.compile.install_torch_compiled``, fullgraph=True,
dim 0 of every tensor argument dynamic) and the graph Dynamo produces is split
with sglang's own ``split_graph`` at sglang's registered split ops, so a test
can check where the fp4 ops land.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import json
import sys
import types
from typing import Any

FP4_OPS = ("sglang.flashinfer_fp4_quantize", "sglang.fp4_gemm")


class _Placeholder(type):
    """An inert class whose every attribute is again a placeholder."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(name, (), {"__init__": lambda self, *a, **k: None})


class _AnyAttr(types.ModuleType):
    """A module whose every attribute is an inert placeholder class."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(name, (), {"__init__": lambda self, *a, **k: None})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname == self.root or fullname.startswith(self.root + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _AnyAttr(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _cpu_import_shims() -> None:
    """Let sglang's import chain finish on a CPU-only torch.

    PyPI has no CPU build of torchvision for torch 2.13 (the CUDA build cannot
    load against CPU torch), but sglang imports ``torchvision.transforms`` at
    module level (multimodal utils) and transformers 5.x gates
    ``AutoImageProcessor`` on torchvision.  sgl_kernel is CUDA-only, and with
    the device simulated as CUDA sglang imports it at module level (fp8
    kernels); on SM120 the fp4 paths traced here never call it.  So: inert
    placeholder modules for both, and the real AutoImageProcessor class.
    """
    stubbed = set()
    # flashinfer.comm loads libcudart at import (CudaRTLibrary); sglang's
    # token dispatchers import it, the fp4 paths never use it.
    sys.meta_path.insert(0, _StubFinder("flashinfer.comm"))
    for root in ("torchvision", "sgl_kernel"):
        try:
            importlib.import_module(root)
        except Exception:
            for name in [m for m in sys.modules if m == root or m.startswith(root + ".")]:
                del sys.modules[name]
            sys.meta_path.insert(0, _StubFinder(root))
            stubbed.add(root)
    if "sgl_kernel" in stubbed:
        # sglang registers fakes for sgl_kernel ops at import; without the
        # library those ops do not exist, so skip exactly those registrations.
        import torch

        register_fake = torch.library.register_fake

        def _register_fake(op: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(op, str) and op.startswith("sgl_kernel::"):
                namespace, name = op.split("::")
                if not hasattr(getattr(torch.ops, namespace), name):
                    return lambda fn: fn
            return register_fake(op, *args, **kwargs)

        torch.library.register_fake = _register_fake
    if "torchvision" in stubbed:
        auto = importlib.import_module("transformers.models.auto.image_processing_auto")
        sys.modules["transformers"].AutoImageProcessor = auto.AutoImageProcessor


def prepare(gpu: str = "sm120") -> None:
    from fp4graph.verify import simulate

    simulate.install(simulate.GPUS[gpu])
    _cpu_import_shims()


def fake_mode() -> Any:
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)


def fp4_linear(in_features: int, out_features: int) -> Any:
    """A LinearBase-like module running ModelOptFp4LinearMethod on NVFP4 weights.

    Weights are fake CUDA tensors in ModelOpt's NVFP4 checkpoint layout
    (uint8 [N, K/2] packed e2m1, float8_e4m3fn [N, K/16] block scales, float32
    per-tensor weight_scale_2 and input_scale), then prepared by the method's
    own ``process_weights_after_loading``.  Call under :func:`fake_mode`.
    """
    import torch
    from sglang.srt.layers.quantization.modelopt_quant import (
        ModelOptFp4Config,
        ModelOptFp4LinearMethod,
    )

    config = ModelOptFp4Config(
        is_checkpoint_nvfp4_serialized=True,
        kv_cache_quant_algo=None,
        group_size=16,
        exclude_modules=[],
    )
    method = ModelOptFp4LinearMethod(config)
    layer = torch.nn.Module()
    method.create_weights(
        layer,
        input_size_per_partition=in_features,
        output_partition_sizes=[out_features],
        input_size=in_features,
        output_size=out_features,
        params_dtype=torch.bfloat16,
    )
    load_nvfp4(layer, method, out_features, in_features)
    layer.quant_method = method
    return layer


def load_nvfp4(layer: Any, method: Any, n: int, k: int) -> None:
    """Give an NVFP4 linear ``layer`` ([n, k]) its checkpoint tensors (fake CUDA) and prepare
    them with ``method``'s own ``process_weights_after_loading``.  Call under :func:`fake_mode`."""
    import torch

    with torch.no_grad():
        layer.weight.data = torch.empty(n, k // 2, dtype=torch.uint8, device="cuda")
        layer.weight_scale.data = torch.empty(n, k // 16, dtype=torch.float8_e4m3fn, device="cuda")
        layer.weight_scale_2.data = torch.empty(1, dtype=torch.float32, device="cuda")
        layer.input_scale.data = torch.empty(1, dtype=torch.float32, device="cuda")
    # CPU builds of torch refuse Tensor.cuda() / .to("cuda") even on fake
    # tensors; a fake holds no data, so a fresh fake CUDA tensor is the same.
    cuda = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *args, **kwargs: torch.empty_strided(  # type: ignore[method-assign]
        self.shape, self.stride(), dtype=self.dtype, device="cuda"
    )
    try:
        method.process_weights_after_loading(layer)
    finally:
        torch.Tensor.cuda = cuda  # type: ignore[method-assign]


class Block(__import__("torch").nn.Module):
    """fp4 linear -> attention split op -> fp4 linear, like a decoder layer's halves."""

    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.qkv = fp4_linear(hidden, inner)
        self.o = fp4_linear(inner, hidden)

    def forward(self, x: Any) -> Any:
        import torch

        h = self.qkv.quant_method.apply(self.qkv, x)
        out = torch.empty_like(h)
        torch.ops.sglang.unified_attention_with_output(h, h, h, out, False, 0)
        return self.o.quant_method.apply(self.o, out)


class Linear(__import__("torch").nn.Module):
    def __init__(self, hidden: int, out: int) -> None:
        super().__init__()
        self.proj = fp4_linear(hidden, out)

    def forward(self, x: Any) -> Any:
        return self.proj.quant_method.apply(self.proj, x)


def trace(module: Any, *args: Any, dynamic_arg_dims: dict[str, int] | None = None) -> dict[str, Any]:
    """Run ``module`` through sglang's piecewise compile entry; report the graphs.

    Returns a JSON-able dict: ``ok``, ``error`` (type and first line),
    ``graph_breaks``, and per Dynamo graph the ops of every piece sglang's
    ``split_graph`` cuts it into (``split`` marks the split-op pieces).
    """
    import torch
    from sglang.srt.compilation import compile as sglang_compile
    from sglang.srt.compilation.backend import split_graph
    from sglang.srt.compilation.compilation_config import CompilationConfig
    from sglang.srt.compilation.piecewise_context_manager import (
        enable_piecewise_cuda_graph,
    )
    from torch._dynamo.utils import counters

    from fp4graph.verify import simulate

    config = CompilationConfig([1, 2, 4], "eager")
    graphs: list[list[dict[str, Any]]] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        _, items = split_graph(gm, config.split_ops)
        pieces = []
        for item in items:
            ops = [
                str(n.target)
                for n in item.graph.graph.nodes
                if n.op == "call_function" and str(n.target).startswith("sglang.")
            ]
            pieces.append({"name": item.submod_name, "split": item.is_splitting_graph, "ops": ops})
        graphs.append(pieces)
        return gm.forward

    counters.clear()
    torch._dynamo.reset()
    sglang_compile.install_torch_compiled(
        module,
        dynamic_arg_dims=dynamic_arg_dims or {"x": 0},

        fullgraph=True,
        backend_factory=backend,
        compile_config=config,
    )
    result: dict[str, Any] = {"ok": True, "error": None}
    try:
        # 0.5.9 gates the compiled path on set_compiled(), 0.5.10+ on
        # enable_piecewise_cuda_graph(); the runner enters both.
        set_compiled = getattr(sglang_compile, "set_compiled", None)
        with contextlib.ExitStack() as stack:
            stack.enter_context(simulate.compiling())
            stack.enter_context(enable_piecewise_cuda_graph())
            if set_compiled is not None:
                stack.enter_context(set_compiled(True))
            out = module(*args)
        result["out"] = [list(map(int, out.shape)), str(out.dtype)]
    except Exception as exc:  # the seed failure on pristine trees
        result["ok"] = False
        first = (str(exc).strip().splitlines() or [""])[0]
        result["error"] = f"{type(exc).__module__}.{type(exc).__name__}: {first}"
        result["error_text"] = str(exc)[:4000]
    result["graph_breaks"] = sum(counters["graph_break"].values())
    result["graphs"] = graphs
    return result


def report(result: dict[str, Any]) -> None:
    print("SGSIM " + json.dumps(result))


class MoeBlock(__import__("torch").nn.Module):
    """fp4 linear -> sglang's piecewise MoE op -> trtllm fp4 hidden-state quantization.

    ``moe_forward_piecewise_cuda_graph_impl`` is the custom op FusedMoE.forward
    calls under piecewise CUDA graph (its fp4 kernels run inside it, eagerly
    during capture); the hidden-state quantization is the SM120 fp4 call of the
    FlashInfer TRT-LLM MoE path, traced here as if compiled in-line.  Where the
    tree has it: the runner's ``quantize_hidden_states_fp4`` (0.5.9 and later),
    else ``FlashInferFP4MoE._quantize_hidden_states_fp4`` (0.5.8.x, the layer
    method the runner function came from), called with this block as ``self``:
    it holds the one layer attribute the method reads.
    """

    def __init__(self, hidden: int) -> None:
        # Registers sglang::moe_forward_piecewise_cuda_graph_impl.
        import sglang.srt.layers.moe.fused_moe_triton.layer  # noqa: F401
        import sglang.srt.layers.moe.moe_runner.flashinfer_trtllm  # noqa: F401
        import torch

        super().__init__()
        self.gate = fp4_linear(hidden, hidden)
        self.scale = torch.empty(1, dtype=torch.float32, device="cuda")
        self.w13_input_scale_quant = self.scale  # FlashInferFP4MoE's name (0.5.8.x)

    def forward(self, x: Any) -> Any:
        import torch
        from sglang.srt.layers.moe.moe_runner import flashinfer_trtllm

        h = self.gate.quant_method.apply(self.gate, x)
        weights = torch.zeros(h.shape[0], 2, dtype=torch.float32, device=h.device)
        ids = torch.zeros(h.shape[0], 2, dtype=torch.int32, device=h.device)
        moe = torch.ops.sglang.moe_forward_piecewise_cuda_graph_impl(h, weights, ids, h, 0)
        if hasattr(flashinfer_trtllm, "quantize_hidden_states_fp4"):
            q, sf = flashinfer_trtllm.quantize_hidden_states_fp4(moe, self.scale)
        else:
            from sglang.srt.layers.moe.fused_moe_triton import layer

            q, sf = layer.FlashInferFP4MoE._quantize_hidden_states_fp4(self, moe)
        return q


def stub_flashinfer_fp4_kernels() -> None:
    """Make flashinfer's fp4 module loader return a no-op kernel.

    flashinfer's own Python (output allocation, reshapes, transposes) then runs
    eagerly on fake tensors, which gives the real op's output metadata
    without a GPU or a JIT build.
    """
    import types as _types

    import flashinfer

    module = sys.modules[flashinfer.fp4_quantize.__module__]

    class _Spec:
        def build_and_load(self) -> Any:
            return _types.SimpleNamespace(fp4_quantize=lambda *args: None)

    for name in dir(module):
        if name.startswith("gen_fp4_quantization_sm") and name.endswith("_module"):
            setattr(module, name, lambda *args, **kwargs: _Spec())
    module.get_fp4_quantization_module.cache_clear()
    # The comparison runs on meta tensors; report them as the SM120 device.
    module.get_compute_capability = lambda device: (12, 0)
    module.device_support_pdl = lambda device: True


def meta(t: Any) -> list[Any]:
    return [list(map(int, t.shape)), list(map(int, t.stride())), str(t.dtype), str(t.device)]


def compare_fake_with_real(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run each case through flashinfer (no-op kernel) and sglang's fake."""
    import flashinfer
    import torch
    from sglang.srt.layers.quantization import fp4_utils

    stub_flashinfer_fp4_kernels()
    rows = []
    for case in cases:
        shape, column_major = case["shape"], case.get("column_major", False)
        kwargs = case.get("kwargs", {})
        outcome = {}
        for side, fn in (("real", flashinfer.fp4_quantize), ("fake", fp4_utils.fp4_quantize)):
            # Meta tensors: CPU torch cannot slice fake CUDA tensors, which
            # flashinfer >= 0.6.7 does to its scale-factor buffer.
            with contextlib.nullcontext():
                x = torch.empty(shape, dtype=torch.bfloat16, device="meta")
                if column_major:
                    x = x.transpose(-2, -1)
                gs = torch.empty(1, dtype=torch.float32, device="meta")
                try:
                    q, sf = fn(x, gs, **kwargs)
                    outcome[side] = [meta(q), meta(sf)]
                except Exception as exc:
                    outcome[side] = f"raises {type(exc).__name__}"
        rows.append({"case": case, **outcome})
    return rows
