"""Code that runs inside a child interpreter for the flashinfer simulation tests.

The parent (pytest) puts an unpacked pristine or patched flashinfer tree first on
sys.path and calls :func:`main` with a JSON request; results come back as one JSON
line prefixed with ``RESULT:`` on stdout.  One child runs many cases: importing
flashinfer and warming Dynamo up costs most of a child's time.

The cases are a table, :data:`CASES` (and :data:`EAGER_ONLY_CASES`): one :class:`Row` each
(name, the op it reaches, inputs, the call, the versions and GPUs that offer it); :func:`cases`
binds them to the imported flashinfer as ``(name, entry point, input builder, call)``.  Inputs
are fake CUDA tensors (``FakeTensorMode``); the device is simulated by
:mod:`fp4graph.verify.simulate`.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from fp4graph.verify import simulate

BF16 = torch.bfloat16


def cuda(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="cuda")


def col_major(m: int, k: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.empty(k, m, dtype=dtype, device="cuda").t()


def gscale() -> torch.Tensor:
    return torch.empty(1, dtype=torch.float32, device="cuda")


def meta(t: Any) -> Any:
    """Shape, dtype and strides of every tensor in an output."""
    if isinstance(t, torch.Tensor):
        return [list(map(int, t.shape)), str(t.dtype), list(map(int, t.stride()))]
    if isinstance(t, (tuple, list)):
        return [meta(x) for x in t]
    return repr(t)


Case = tuple[str, str, Callable[[], tuple], Callable[..., Any]]
# A case's condition: does this flashinfer module, on a GPU of this capability, offer it?
Available = Callable[[Any, tuple[int, int]], bool]


# --- the case table ------------------------------------------------------------------
#
# Every row must trace fullgraph to the flashinfer op named by its entry, export strict and
# non-strict, pass opcheck, and its eager path's output metadata must equal the op's fake
# (tests/flashinfer/test_fp4_ops.py; EAGER_ONLY_CASES run eagerly only).


def always(fi: Any, capability: tuple[int, int]) -> bool:
    return True


def has_parameter(function: str, parameter: str) -> Available:
    """Versions whose ``flashinfer.<function>`` takes ``parameter``."""
    return lambda fi, capability: _has_param(getattr(fi, function), parameter)


def sm10x(fi: Any, capability: tuple[int, int]) -> bool:
    return capability[0] == 10


def sm10x_mm_fp4_cute_dsl(fi: Any, capability: tuple[int, int]) -> bool:
    """0.6.7+, SM100/103 only."""
    return capability[0] == 10 and fi.mm_fp4.has_backend("cute-dsl")


@dataclass(frozen=True)
class Layout:
    """An argument that is ``flashinfer.SfLayout.<name>``."""

    name: str


class Args:
    """What a case passes after its inputs: ``function(*inputs, *args, **kwargs)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs

    def call(self, fi: Any, function: str) -> Callable[..., Any]:
        fn = getattr(fi, function)
        args = tuple(
            getattr(fi.SfLayout, a.name) if isinstance(a, Layout) else a for a in self.args
        )
        kwargs = self.kwargs
        return lambda *inputs: fn(*inputs, *args, **kwargs)


@dataclass(frozen=True)
class Row:
    name: str  # the key of the case's results
    entry: str  # the flashinfer op it must reach
    inputs: Callable[[], tuple]  # builds the inputs, under FakeTensorMode
    args: Args = Args()  # the arguments after them
    available: Available = always
    function: str = ""  # the public function called, if not flashinfer.<entry>

    def case(self, fi: Any) -> Case:
        return (self.name, self.entry, self.inputs, self.args.call(fi, self.function or self.entry))


def x_and_scale(*shape: int, dtype: torch.dtype = BF16) -> Callable[[], tuple]:
    return lambda: (cuda(*shape, dtype=dtype), gscale())


def col_major_and_scale(m: int, k: int) -> Callable[[], tuple]:
    return lambda: (col_major(m, k), gscale())


def tensor(*shape: int, dtype: torch.dtype = BF16) -> Callable[[], tuple]:
    return lambda: (cuda(*shape, dtype=dtype),)


def grouped(groups: int, m: int, k: int) -> Callable[[], tuple]:
    """Activations, per-group row counts and global scales."""
    return lambda: (
        cuda(groups, m, k),
        cuda(groups, dtype=torch.int32),
        cuda(groups, dtype=torch.float32),
    )


def mm_inputs(m: int = 48, n: int = 256, k: int = 256) -> tuple:
    """mm_fp4: a (m, k/2) row-major, b (k/2, n) column-major (b_fp4.T), scales likewise."""
    u8 = torch.uint8
    a = cuda(m, k // 2, dtype=u8)
    b = cuda(n, k // 2, dtype=u8).t()
    a_sf = cuda(_pad(m, 128), k // 16, dtype=u8)
    b_sf = cuda(n, k // 16, dtype=u8).t()
    alpha = cuda(1, dtype=torch.float32)
    return a, b, a_sf, b_sf, alpha


U8 = torch.uint8
F16 = torch.float16
Q = "fp4_quantize"
NQ = "nvfp4_quantize"
BSI = "block_scale_interleave"
MM = "mm_fp4"

# Every fp4 entry point and layout (public API only), in the order they run.
CASES: tuple[Row, ...] = (
    # fp4_quantize(x, global_scale, sf_vec_size, sf_use_ue8m0, is_sf_swizzled_layout, ...)
    Row("fp4_quantize-128x4-sf16", Q, x_and_scale(128, 256)),
    Row("fp4_quantize-m37-128x4", Q, x_and_scale(37, 512)),
    Row("fp4_quantize-8x4", Q, x_and_scale(40, 256), Args(16, False, True, True)),
    Row("fp4_quantize-linear", Q, x_and_scale(40, 256), Args(16, False, False)),
    Row("fp4_quantize-sf32-ue8m0", Q, x_and_scale(64, 512), Args(32, True, True)),
    Row("fp4_quantize-fp16-pdl", Q, x_and_scale(64, 256, dtype=F16), Args(enable_pdl=True)),
    Row("fp4_quantize-colmajor", Q, col_major_and_scale(256, 128)),
    Row("fp4_quantize-colmajor-linear", Q, col_major_and_scale(256, 128), Args(16, False, False)),
    Row("fp4_quantize-3d", Q, x_and_scale(4, 64, 256)),
    Row("fp4_quantize-3d-linear", Q, x_and_scale(4, 64, 256), Args(16, False, False)),
    Row("fp4_quantize-no-global-scale", Q, tensor(128, 256)),
    # 0.6.8+: backend="cuda" (default) | "cute-dsl"
    Row(
        "fp4_quantize-backend-cuda",
        Q,
        x_and_scale(37, 512),
        Args(backend="cuda"),
        has_parameter(Q, "backend"),
    ),
    Row("nvfp4_quantize-128x4", NQ, x_and_scale(100, 256), Args(Layout("layout_128x4"))),
    Row("nvfp4_quantize-8x4", NQ, x_and_scale(100, 256), Args(Layout("layout_8x4"))),
    Row("nvfp4_quantize-linear", NQ, x_and_scale(100, 256), Args(Layout("layout_linear"))),
    Row(
        "nvfp4_quantize-shuffle",
        NQ,
        x_and_scale(256, 256),
        Args(Layout("layout_128x4"), do_shuffle=True),
    ),
    Row("mxfp4_quantize", "mxfp4_quantize", tensor(128, 512)),
    Row(
        "mxfp4_quantize-backend-cuda",
        "mxfp4_quantize",
        tensor(100, 512),
        Args(backend="cuda"),
        has_parameter("mxfp4_quantize", "backend"),  # 0.6.7+
    ),
    Row("block_scale_interleave-2d", BSI, tensor(100, 20, dtype=U8)),
    Row("block_scale_interleave-3d", BSI, tensor(4, 100, 20, dtype=U8)),
    Row("block_scale_interleave-bf16", BSI, tensor(128, 16, dtype=BF16)),
    Row(
        "nvfp4_block_scale_interleave",
        BSI,
        tensor(256, 16, dtype=U8),
        function="nvfp4_block_scale_interleave",
    ),
    Row("nvfp4_batched_quantize", "nvfp4_batched_quantize", x_and_scale(4, 100, 256)),
    Row("scaled_fp4_grouped_quantize", "scaled_fp4_grouped_quantize", grouped(4, 100, 256)),
    Row(
        "silu_and_mul_scaled_nvfp4_experts_quantize",
        "silu_and_mul_scaled_nvfp4_experts_quantize",
        grouped(4, 100, 512),
    ),
    # mm_fp4(a, b, a_descale, b_descale, alpha, out_dtype, ..., backend=)
    Row("mm_fp4-cutlass", MM, mm_inputs, Args(BF16, backend="cutlass")),
    Row("mm_fp4-cudnn", MM, mm_inputs, Args(BF16, backend="cudnn")),
    Row("mm_fp4-auto", MM, mm_inputs, Args(BF16, backend="auto")),
    Row("mm_fp4-trtllm", MM, mm_inputs, Args(BF16, backend="trtllm"), sm10x),
    Row("mm_fp4-cute-dsl", MM, mm_inputs, Args(BF16, backend="cute-dsl"), sm10x_mm_fp4_cute_dsl),
    Row("mm_fp4-cutlass-fp16", MM, mm_inputs, Args(F16, backend="cutlass")),
    Row(
        "mm_fp4-cutlass-nopdl",
        MM,
        mm_inputs,
        Args(BF16, backend="cutlass", enable_pdl=False),
        has_parameter(MM, "enable_pdl"),  # 0.6.7+
    ),
)

# Layouts whose eager behaviour is an error in some versions (0.6.3's reshape).
EAGER_ONLY_CASES: tuple[Row, ...] = (
    Row("fp4_quantize-k96-128x4", Q, x_and_scale(128, 96)),
    Row("fp4_quantize-k96-linear", Q, x_and_scale(128, 96), Args(16, False, False)),
    Row("fp4_quantize-k160-sf32", Q, x_and_scale(8, 160), Args(32, True, True)),
    Row("fp4_quantize-sf8-invalid", Q, x_and_scale(8, 160), Args(8)),
)


def _bind(rows: tuple[Row, ...], capability: tuple[int, int]) -> list[Case]:
    import flashinfer as fi

    return [row.case(fi) for row in rows if row.available(fi, capability)]


def cases(version: str, capability: tuple[int, int]) -> list[Case]:
    """The rows of :data:`CASES` this version offers on this GPU."""
    return _bind(CASES, capability)


def extra_eager_cases() -> list[Case]:
    """The rows of :data:`EAGER_ONLY_CASES`."""
    return _bind(EAGER_ONLY_CASES, CAPABILITY)


def _has_param(fn: Callable[..., Any], name: str) -> bool:
    import inspect

    return name in inspect.signature(inspect.unwrap(fn)).parameters


def _pad(x: int, y: int) -> int:
    return (x + y - 1) // y * y


def trace_all(
    version: str, patched: bool, dynamic_modes: list[bool | None], only: list[str] | None
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, entry, build, call in cases(version, CAPABILITY):
        if only and name not in only:
            continue
        for dynamic in dynamic_modes:
            key = f"{name}|dynamic={dynamic}"
            rec: dict[str, Any] = {"entry": entry}
            results[key] = rec
            torch._dynamo.reset()
            with FakeTensorMode(allow_non_fake_inputs=True):
                args = build()
                try:
                    with simulate.compiling():
                        compiled = torch.compile(
                            call, fullgraph=True, backend="eager", dynamic=dynamic
                        )
                        got = compiled(*args)
                    rec["ok"] = True
                    rec["meta"] = meta(got)
                except Exception as e:  # the pristine failure, or a regression
                    rec["ok"] = False
                    rec["error_type"] = f"{type(e).__module__}.{type(e).__name__}"
                    rec["error"] = (str(e).splitlines() or [""])[0][:400]
                    continue
                if patched:
                    torch._dynamo.reset()
                    with simulate.compiling():
                        ex = torch._dynamo.explain(call)(*args)
                    rec["graph_breaks"] = ex.graph_break_count
                    rec["graphs"] = ex.graph_count
                    rec["ops"] = sorted(
                        {
                            str(n.target)
                            for g in ex.graphs
                            for n in g.graph.nodes
                            if n.op == "call_function" and "flashinfer" in str(n.target)
                        }
                    )
                    # What the fake promises: the op called directly under the fake mode.
                    rec["fake_meta"] = meta(_direct_op(entry, call, args))
    return results


def export_all(version: str, only: list[str] | None) -> dict[str, Any]:
    """torch.export.export of every case, strict (Dynamo) and non-strict (the Python runs
    as written): ok, and the flashinfer ops in the exported graph."""
    results: dict[str, Any] = {}

    class Call(torch.nn.Module):
        def __init__(self, call: Callable[..., Any]) -> None:
            super().__init__()
            self.call = call

        def forward(self, *args: Any) -> Any:
            return self.call(*args)

    for name, entry, build, call in cases(version, CAPABILITY):
        if only and name not in only:
            continue
        for strict in (True, False):
            rec: dict[str, Any] = {"entry": entry}
            results[f"{name}|strict={strict}"] = rec
            torch._dynamo.reset()
            with FakeTensorMode(allow_non_fake_inputs=True):
                args = build()
                try:
                    with simulate.compiling():
                        program = torch.export.export(Call(call), args, strict=strict)
                except Exception as e:
                    rec["ok"] = False
                    rec["error"] = f"{type(e).__module__}.{type(e).__name__}: " + (
                        str(e).splitlines() or [""]
                    )[0][:300]
                    continue
            code = program.graph_module.code
            rec["ok"] = True
            rec["ops"] = sorted(set(re.findall(r"torch\.ops\.flashinfer\.(\w+)", code)))
    return results


def _direct_op(entry: str, call: Callable[..., Any], args: tuple) -> Any:
    """Call the public function as non-strict torch.export does (compiling_flag): it
    forwards to its traced twin, whose op's fake runs under the active FakeTensorMode."""
    with compiling_flag():
        return call(*args)


CAPABILITY: tuple[int, int] = (12, 0)
NVCC_VERSION = "12.9"


class _StubModule:
    """A loaded JIT module whose every function is a no-op (the C++ kernels fill
    preallocated outputs; on CPU there is nothing to run)."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


def _plain_scratch_buffer(
    name: str, num_bytes: int, device: torch.device, zero_init: bool = False
) -> torch.Tensor:
    alloc = torch.zeros if zero_init else torch.empty
    return alloc(num_bytes, dtype=torch.uint8, device=device)


class _CudnnObject:
    """Whatever cuDNN's graph API returns: graphs, tensors, handles, enum values.

    Every call and attribute gives another one; a graph needs no workspace and has
    one execution plan; executing it does nothing (FlashInfer's kernels fill no
    outputs on CPU either)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _CudnnObject()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _CudnnObject()

    def __enter__(self) -> tuple[Any, Any]:
        return _CudnnObject(), None

    def __exit__(self, *exc: Any) -> None:
        return None

    def get_workspace_size(self) -> int:
        return 0

    def get_execution_plan_count(self) -> int:
        return 1


class _CudnnFrontend(types.ModuleType):
    """cuDNN's Python frontend (nvidia-cudnn-frontend, a compiled module that needs
    libcudnn and a GPU), as FlashInfer's cuDNN fp4 GEMM path uses it."""

    __version__ = "1.16.0"

    def __init__(self) -> None:
        super().__init__("cudnn")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _CudnnObject()

    @staticmethod
    def backend_version() -> int:
        return 91600

    @staticmethod
    def graph(*args: Any, **kwargs: Any) -> _CudnnObject:
        return _CudnnObject()


def gemm_module() -> types.ModuleType:
    """FlashInfer's GEMM module: ``flashinfer.gemm.gemm_base`` from 0.5.3, the module
    ``flashinfer.gemm`` itself up to 0.5.2."""
    import importlib

    gemm = importlib.import_module("flashinfer.gemm")
    if hasattr(gemm, "__path__"):
        return importlib.import_module("flashinfer.gemm.gemm_base")
    return gemm


def stub_cudnn() -> None:
    """Make FlashInfer's GEMMs find cuDNN (the :class:`_CudnnFrontend` stand-in)."""
    gemm_base = gemm_module()
    gemm_base.cudnn = _CudnnFrontend()
    gemm_base.CUDNN_AVAILABLE = True


def cudnn_plan_check() -> dict[str, Any]:
    """The keys FlashInfer's cuDNN fp4 requirement check hands its plan cache for one
    GEMM shape and two layers' alphas (flashinfer#2450).  Stands in for the plan
    builder (``create_cudnn_execution_plans_fp4_gemm``: cuDNN graph construction) by
    recording its ``alpha_is_not_none`` argument; the requirement check runs as shipped."""
    gemm_base = gemm_module()
    requirement = getattr(gemm_base, "_cudnn_gemm_fp4_requirement", None)
    builder = getattr(gemm_base, "create_cudnn_execution_plans_fp4_gemm", None)
    if requirement is None or builder is None:
        return {"absent": True}
    stub_cudnn()
    keys: list[Any] = []
    at = list(inspect.signature(builder).parameters).index("alpha_is_not_none")

    def plans(*args: Any) -> Any:
        keys.append(args[at])
        return _CudnnObject()

    gemm_base.create_cudnn_execution_plans_fp4_gemm = plans
    u8 = torch.uint8
    m, n, k = 48, 256, 256
    with FakeTensorMode(allow_non_fake_inputs=True):
        a, b = cuda(m, k // 2, dtype=u8), cuda(n, k // 2, dtype=u8).t()
        a_sf, b_sf = cuda(_pad(m, 128), k // 16, dtype=u8), cuda(n, k // 16, dtype=u8).t()
        for _layer in range(2):
            requirement(a, b, a_sf, b_sf, gscale(), BF16)
    return {"calls": len(keys), "cache_entries": len(set(keys)), "key_types": sorted({type(k).__name__ for k in keys})}


def stub_jit(tmp: str, module: Callable[[], Any] = _StubModule, *, nvcc: str | None = NVCC_VERSION) -> list[str]:
    """Replace building and loading of JIT modules (nvcc, ninja, dlopen) by a stub.

    The spec generation, check_jit_allowed() and the module getters still run.
    ``nvcc``: the toolkit version our series' builds read (``FLASHINFER_NVCC_VERSION``);
    None: the ``nvcc`` on CUDA_HOME / PATH answers, as it does for pristine FlashInfer.
    Returns the list the names of built modules are appended to."""
    import os

    os.environ["FLASHINFER_WORKSPACE_BASE"] = tmp
    # By default a CUDA 12.9 toolkit beside the simulated CUDA 12.8 build of torch: from
    # 0.6.7 on, FlashInfer builds SM12x only with nvcc >= 12.9 (compute_120f).
    if nvcc is None:
        os.environ.pop("FLASHINFER_NVCC_VERSION", None)
    else:
        os.environ.setdefault("FLASHINFER_NVCC_VERSION", nvcc)
    from flashinfer.jit import core

    built: list[str] = []

    def build(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(self.name)

    # nvfp4_quantize / mxfp4_quantize call .cuda() on their inputs, which a CPU
    # build of torch refuses even for fake CUDA tensors (already on the device).
    to_cuda = torch.Tensor.cuda

    def cuda_(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self if self.device.type == "cuda" else to_cuda(self, *args, **kwargs)

    torch.Tensor.cuda = cuda_  # type: ignore[method-assign]

    # Python indexing of a fake CUDA tensor needs a CUDA build of torch (a device
    # guard); 0.6.7+ return ``out_sf[:size]``.  aten.slice is the same view.
    getitem = torch.Tensor.__getitem__

    def getitem_(self: torch.Tensor, idx: Any) -> Any:
        if self.device.type == "cuda" and isinstance(idx, slice) and idx.step in (None, 1):
            start = 0 if idx.start is None else idx.start
            stop = sys.maxsize if idx.stop is None else idx.stop
            return torch.ops.aten.slice.Tensor(self, 0, start, stop)
        return getitem(self, idx)

    torch.Tensor.__getitem__ = getitem_  # type: ignore[method-assign]
    # JitSpec (0.6.x) or its subclasses (0.7.x: JitSpecNvcc, ..., with try_load).
    classes = [core.JitSpec]
    for cls in classes:
        classes.extend(c for c in cls.__subclasses__() if c not in classes)
    for cls in classes:
        if "build" in vars(cls):
            cls.build = build
        if "load" in vars(cls):
            cls.load = lambda self, *a, **k: module()
        if "try_load" in vars(cls):
            cls.try_load = lambda self: None
        if "is_aot" in vars(cls):
            cls.is_aot = property(lambda self: False)
    # trtllm-gen modules download cubins and checksums at spec generation.
    import flashinfer.fused_moe.core  # noqa: F401
    gemm_module()

    # (0.6.3: get_cubin; 0.6.7+: get_artifact, export headers, symlinks).
    stubs: dict[str, Callable[..., Any]] = {
        "get_cubin": lambda *a, **k: b"0" * 64 + b" flashinferMetaInfo.h\n",
        "get_artifact": lambda *a, **k: b"0" * 64 + b" flashinferMetaInfo.h\n",
        "get_meta_hash": lambda *a, **k: "0" * 64,
        "setup_cubin_loader": lambda *a, **k: None,
        "ensure_symlink": lambda *a, **k: None,
        "verify_symlinked_headers": lambda *a, **k: None,
        "write_filtered_metainfo": lambda *a, **k: None,  # 0.7.x trtllm-gen MoE
        # 0.7.x: scratch buffers keyed by the raw CUDA stream, from a private MemPool
        # (neither exists on a CPU build of torch); the buffer itself is the same.
        "_get_stream_cache_buf": _plain_scratch_buffer,
    }
    for mod_name, mod in list(sys.modules.items()):
        if not mod_name.startswith("flashinfer") or mod is None:
            continue
        for attr, stub in stubs.items():
            if hasattr(mod, attr):
                setattr(mod, attr, stub)
    return built


def eager_all(version: str, only: list[str] | None) -> dict[str, Any]:
    """Run each case's public function eagerly (the code path users run), with the
    kernels stubbed, under FakeTensorMode; and the op's fake.  Both metas come back."""
    results: dict[str, Any] = {}
    patched = hasattr(torch.ops.flashinfer, "fp4_quantize") and has_op("fp4_quantize")
    for name, entry, build, call in cases(version, CAPABILITY) + extra_eager_cases():
        if only and name not in only:
            continue
        rec: dict[str, Any] = {"entry": entry}
        results[name] = rec
        with FakeTensorMode(allow_non_fake_inputs=True):
            args = build()
            try:
                rec["eager"] = meta(call(*args))
            except Exception as e:
                rec["eager_error"] = f"{type(e).__name__}: {str(e)[:200]}"
            if patched and has_op(entry):
                try:
                    rec["fake"] = meta(_direct_op(entry, call, args))
                except Exception as e:
                    rec["fake_error"] = f"{type(e).__name__}: {str(e)[:200]}"
    return results


def has_op(entry: str) -> bool:
    try:
        getattr(torch.ops.flashinfer, entry)
        return True
    except (AttributeError, RuntimeError):
        return False


class _Captured(Exception):
    pass


def first_flashinfer_op(call: Callable[..., Any], args: tuple) -> tuple[Any, tuple, dict] | None:
    """The first ``flashinfer::`` op (and its arguments) the public function dispatches
    to while compiling, or None; the call stops there."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Capture(TorchDispatchMode):
        call: tuple[Any, tuple, dict] | None = None

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if func.namespace == "flashinfer":
                self.call = (func, args, kwargs or {})
                raise _Captured
            return func(*args, **(kwargs or {}))

    cap = Capture()
    try:
        with compiling_flag(), cap:
            call(*args)
    except _Captured:
        pass
    return cap.call


def opcheck_all(version: str, only: list[str] | None) -> dict[str, Any]:
    """torch.library.opcheck every op on CPU tensors.

    The real kernels need a GPU.  For the check, each op gets a CPU kernel,
    registered only in this process: the op's own real implementation (the public
    function's eager path, with the JIT module stubbed) followed by zeroing its
    outputs so that runs compare equal.  opcheck then checks the schema (no
    undeclared mutation or aliasing), the autograd registration, the fake against
    the eager Python's output metadata (test_faketensor), and AOT dispatch with
    dynamic shapes.  Kernel numerics are not checked (GPU tests do that)."""
    return opcheck_cases([c for c in cases(version, CAPABILITY) if not only or c[0] in only])


def opcheck_cases(case_list: list[Case]) -> dict[str, Any]:
    """opcheck_all's check of the op each of ``case_list`` reaches."""
    _allclose_float8()
    results: dict[str, Any] = {}
    registered: set[str] = set()
    for name, entry, build, call in case_list:
        rec: dict[str, Any] = {"entry": entry}
        results[name] = rec
        with FakeTensorMode(allow_non_fake_inputs=True):
            fake_args = build()
        cpu_args = tuple(_cpu_like(a) for a in fake_args)
        try:
            captured = first_flashinfer_op(call, cpu_args)
        except Exception as e:
            rec["error"] = f"capture: {type(e).__name__}: {e}"[:300]
            continue
        if captured is None:
            rec["error"] = "no flashinfer op was called"
            continue
        op, a, k = captured
        opname = op._schema.name.split("::")[1]
        rec["op"] = opname
        if opname not in registered:
            _register_cpu_kernel(opname)
            registered.add(opname)
        try:
            with simulate.compiling():  # AOT dispatch must not touch the CUDA RNG
                res = torch.library.opcheck(op, a, k)
            rec["opcheck"] = {t: str(v) for t, v in res.items()}
        except Exception as e:
            rec["error"] = f"opcheck: {type(e).__name__}: {str(e)[:600]}"
    return results


def _allclose_float8() -> None:
    """opcheck's schema check compares inputs before and after the call with
    torch.allclose, which CPU torch does not implement for float8: compare their
    bytes instead (what SchemaCheckMode means: "not mutated")."""
    allclose = torch.allclose
    float8 = {torch.float8_e4m3fn, torch.float8_e5m2}

    def allclose_(a: torch.Tensor, b: torch.Tensor, *args: Any, **kwargs: Any) -> bool:
        if a.dtype in float8 and b.dtype == a.dtype:
            return torch.equal(a.view(torch.uint8), b.view(torch.uint8))
        return allclose(a, b, *args, **kwargs)

    torch.allclose = allclose_  # type: ignore[assignment]


class compiling_flag:
    """The state non-strict torch.export traces in (torch._export.utils.
    _compiling_state_context): torch.compiler.is_compiling() and is_exporting() are
    True while the Python runs as written.  The series' public functions then forward
    to the traced twin that torch.compile substitutes for them (utils.trace_as)."""

    def __enter__(self) -> None:
        self.old = (torch.compiler._is_compiling_flag, torch.compiler._is_exporting_flag)
        torch.compiler._is_compiling_flag = True
        torch.compiler._is_exporting_flag = True

    def __exit__(self, *exc: Any) -> None:
        torch.compiler._is_compiling_flag, torch.compiler._is_exporting_flag = self.old


def _cpu_like(t: Any) -> Any:
    if isinstance(t, (list, tuple)):
        return type(t)(_cpu_like(v) for v in t)
    if isinstance(t, torch.Tensor):
        # Same shape and strides, on CPU, deterministic contents.
        out = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="cpu")
        if out.dtype.is_floating_point:
            out.fill_(1.0)
        else:
            out.zero_()
        return out
    return t


def _register_cpu_kernel(opname: str) -> None:
    """CPU kernel for opcheck: the op's real implementation (the public function's
    eager path, JIT module stubbed) run on fake CUDA copies of the inputs -- the
    wrapper insists on CUDA devices -- and its outputs materialized on CPU, zeroed,
    with the same shapes, dtypes and strides."""
    from torch._library.custom_ops import OPDEFS

    opdef = OPDEFS[f"flashinfer::{opname}"]
    real = opdef._init_fn

    def cpu_kernel(*args: Any, **kwargs: Any) -> Any:
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        with mode:
            fargs = [_fake_cuda_like(a) for a in args]
            fkwargs = {k: _fake_cuda_like(v) for k, v in kwargs.items()}
            out = real(*fargs, **fkwargs)
        if out is None:
            return None
        if isinstance(out, torch.Tensor):
            return _zeros_like_cpu(out)
        return type(out)(_zeros_like_cpu(t) for t in out)

    opdef.register_kernel("cpu")(cpu_kernel)


def _zeros_like_cpu(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype).zero_()


def _fake_cuda_like(t: Any) -> Any:
    if isinstance(t, (list, tuple)):
        return type(t)(_fake_cuda_like(v) for v in t)
    if isinstance(t, torch.Tensor):
        return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="cuda")
    return t


def _quoted_module(msg: str) -> str | None:
    import re

    m = re.search(r"FlashInfer JIT (?:module|build step) '([^']+)'", msg)
    return m.group(1) if m else None


def _fp4_module_getter() -> Callable[..., Any]:
    """get_fp4_quantization_module, wherever this version defines it (0.6.7 moved
    it to flashinfer.quantization.fp4_quantization; flashinfer.fp4_quantization
    re-exports it)."""
    import flashinfer.fp4_quantization as fq

    return fq.get_fp4_quantization_module


def arch_check(built: list[str]) -> dict[str, Any]:
    """Which fp4 module and target archs a build picks, by the nvcc version
    (FLASHINFER_NVCC_VERSION) against the simulated torch.version.cuda (12.8)."""
    import os

    from flashinfer.jit import core, cpp_ext

    out: dict[str, Any] = {"torch_cuda": torch.version.cuda}
    getter = _fp4_module_getter()
    arch = f"{CAPABILITY[0]}{CAPABILITY[1]}"
    for nvcc in ("12.8", "12.9"):
        os.environ["FLASHINFER_NVCC_VERSION"] = nvcc
        _clear_toolkit_version(cpp_ext)
        ctx = type(core.current_compilation_context)()
        rec: dict[str, Any] = {"target_archs": sorted(f"{a}{b}" for a, b in ctx.TARGET_CUDA_ARCHS)}
        n = len(built)
        try:
            getter.__wrapped__(arch)
            rec["module"] = built[n:]
        except Exception as e:
            rec["error"] = f"{type(e).__name__}: {e}"[:200]
        out[f"nvcc={nvcc}"] = rec
    os.environ["FLASHINFER_NVCC_VERSION"] = NVCC_VERSION
    _clear_toolkit_version(cpp_ext)
    return out


def _clear_toolkit_version(cpp_ext: Any) -> None:
    """Forget the cached toolkit version (get_cuda_version; revision <= 3 of the 0.6.x
    series and 5 of 0.7.4 had it as get_nvcc_version)."""
    for name in ("get_cuda_version", "get_nvcc_version"):
        if hasattr(getattr(cpp_ext, name, None), "cache_clear"):
            getattr(cpp_ext, name).cache_clear()


def jit_error_check() -> dict[str, Any]:
    """Reaching a JIT getter while Dynamo traces gives the clear RuntimeError."""
    get_fp4_quantization_module = _fp4_module_getter()

    out: dict[str, Any] = {}

    arch = f"{CAPABILITY[0]}{CAPABILITY[1]}"

    def f(x: torch.Tensor) -> torch.Tensor:
        get_fp4_quantization_module.__wrapped__(arch)
        return x + 1

    import os

    for nvcc_override in (None, "12.8"):
        if nvcc_override is None:
            os.environ.pop("FLASHINFER_NVCC_VERSION", None)
        else:
            os.environ["FLASHINFER_NVCC_VERSION"] = nvcc_override
        torch._dynamo.reset()
        with FakeTensorMode(allow_non_fake_inputs=True):
            x = cuda(4)
            try:
                with simulate.compiling():
                    torch.compile(f, fullgraph=True, backend="eager")(x)
                msg = "no error"
            except Exception as e:
                msg = f"{type(e).__module__}.{type(e).__name__}: {e}"
        out[f"traced-nvcc={nvcc_override}"] = {
            "error": msg.splitlines()[0][:200],
            "message": _jit_message(msg),
            "module": _quoted_module(msg),
        }
    with compiling_flag():
        try:
            get_fp4_quantization_module.__wrapped__(arch)
            out["flag"] = "no error"
        except Exception as e:
            out["flag"] = f"{type(e).__module__}.{type(e).__name__}: {e}"[:1200]
            out["flag_module"] = _quoted_module(str(e))
    return out


def _jit_message(msg: str) -> str:
    """The JIT guard's own message inside what Dynamo raised around it."""
    start = msg.find("FlashInfer JIT")
    return msg[start : start + 1200] if start >= 0 else msg[:1200]


def _clear_module_getters() -> None:
    """Forget every cached JIT module getter, as in a fresh process."""
    for name, mod in list(sys.modules.items()):
        if not name.startswith("flashinfer") or mod is None:
            continue
        for attr in list(vars(mod).values()):
            # get_*_module and their private _get_*_module_impl (0.7.x).
            name_ = getattr(attr, "__name__", "")
            if callable(getattr(attr, "cache_clear", None)) and "get_" in name_ and "module" in name_:
                attr.cache_clear()


def select_check(built: list[str]) -> dict[str, Any]:
    """fp4_warmup(modules=[kind]) for each kind, from cold getters: what it builds,
    and the kind the JIT guard names for each module built."""
    import flashinfer
    from flashinfer.jit.utils import fp4_warmup_kind

    warmup_module = sys.modules[flashinfer.fp4_warmup.__module__]
    out: dict[str, Any] = {}
    for kind in warmup_module.FP4_MODULE_KINDS:
        _clear_module_getters()
        del built[:]
        try:
            names = flashinfer.fp4_warmup(torch.device("cuda", 0), modules=[kind])
        except Exception as e:
            out[kind] = {"error": f"{type(e).__name__}: {e}"}
            continue
        out[kind] = {"names": names, "built": list(built), "kinds": [fp4_warmup_kind(n) for n in built]}
    _clear_module_getters()
    del built[:]
    return out


# The CUDA toolkit's nvcc, as FlashInfer asks it before a build (no CI machine
# is assumed to have one): ``nvcc --version`` of a CUDA 12.9 toolkit.
NVCC_STAND_IN = """#!/bin/sh
if [ "$1" = --version ]; then
  echo "Cuda compilation tools, release 12.9, V12.9.41"
  exit 0
fi
echo "nvcc stand-in: only --version is answered: $*" >&2
exit 2
"""


def _cuda_home(nvcc: bool) -> str:
    """A CUDA_HOME whose bin/nvcc is :data:`NVCC_STAND_IN`, or one without nvcc
    (FlashInfer then falls back to torch.version.cuda, 12.8 here)."""
    import os
    import tempfile

    home = tempfile.mkdtemp(prefix="fi-cuda-")
    if nvcc:
        os.makedirs(os.path.join(home, "bin"))
        path = os.path.join(home, "bin", "nvcc")
        with open(path, "w") as f:
            f.write(NVCC_STAND_IN)
        os.chmod(path, 0o755)
    return home


class _capturing:
    """The current stream captures a CUDA graph: what torch.cuda's
    is_current_stream_capturing() answers inside ``with torch.cuda.graph(g):``
    (no CUDA graph exists on a CPU build of torch)."""

    def __enter__(self) -> None:
        self.old = torch.cuda.is_current_stream_capturing
        torch.cuda.is_current_stream_capturing = lambda: True

    def __exit__(self, *exc: Any) -> None:
        torch.cuda.is_current_stream_capturing = self.old


def _as_fresh_process() -> None:
    """Forget what a first fp4 call resolves: the module getters, the CUDA path,
    the nvcc version, Dynamo's compiled code."""
    from flashinfer.jit import cpp_ext

    _clear_module_getters()
    for name in ("get_cuda_path", "get_cuda_version", "get_nvcc_version"):
        if hasattr(getattr(cpp_ext, name, None), "cache_clear"):
            getattr(cpp_ext, name).cache_clear()
    torch._dynamo.reset()


def cold_check(tmp: str, subprocesses: list[str]) -> dict[str, Any]:
    """The first fp4 call of a fresh process that skipped fp4_warmup: an empty JIT
    cache (``tmp``), FLASHINFER_NVCC_VERSION unset, nvcc present or absent.

    Per toolkit, from a fresh state each: ``capture``, the eager fp4_quantize inside a
    CUDA graph capture (tests/gpu's sequence); ``compiled-capture``, fp4_quantize
    compiled fullgraph (its op) and first run inside a capture (the op's CPU kernel
    is its real implementation, as in opcheck); ``trace``, the fp4 module getter
    reached while Dynamo traces.  Each records the error, the module it names, the
    nvcc runs and the builds started (the guard must refuse before any)."""
    import os

    import flashinfer

    built = stub_jit(tmp)
    os.environ.pop("FLASHINFER_NVCC_VERSION", None)  # stub_jit's default
    _register_cpu_kernel("fp4_quantize")
    getter = _fp4_module_getter()
    arch = f"{CAPABILITY[0]}{CAPABILITY[1]}"

    def capture() -> None:
        with FakeTensorMode(allow_non_fake_inputs=True), _capturing():
            flashinfer.fp4_quantize(cuda(16, 256), gscale())

    def compiled_capture() -> None:
        compiled = torch.compile(
            lambda x, gs: flashinfer.fp4_quantize(x, gs), fullgraph=True, backend="eager"
        )
        with simulate.compiling(), _capturing():
            compiled(torch.ones(16, 256, dtype=BF16), torch.ones(1))

    def trace() -> None:
        def f(x: torch.Tensor) -> torch.Tensor:
            getter(arch)
            return x + 1

        with simulate.compiling():
            torch.compile(f, fullgraph=True, backend="eager")(torch.zeros(4))

    out: dict[str, Any] = {}
    for toolkit in ("nvcc", "no-nvcc"):
        os.environ["CUDA_HOME"] = _cuda_home(toolkit == "nvcc")
        out[toolkit] = {}
        for step, run in (("capture", capture), ("compiled-capture", compiled_capture), ("trace", trace)):
            _as_fresh_process()
            del built[:], subprocesses[:]
            try:
                run()
                msg = "no error"
            except Exception as e:
                msg = f"{type(e).__module__}.{type(e).__name__}: {e}"
            out[toolkit][step] = {
                "error": msg.splitlines()[0][:300],
                "message": _jit_message(msg),
                "module": _quoted_module(msg),
                "nvcc_runs": [c for c in subprocesses if "nvcc" in c],
                "built": list(built),
            }
    return out


def _spy_subprocesses() -> list[str]:
    """Record every subprocess started from now on (nvcc, which nvcc, ...)."""
    import subprocess

    calls: list[str] = []
    real_init = subprocess.Popen.__init__

    def init(self: Any, args: Any, *a: Any, **k: Any) -> None:
        calls.append(" ".join(map(str, args)) if isinstance(args, (list, tuple)) else str(args))
        real_init(self, args, *a, **k)

    subprocess.Popen.__init__ = init  # type: ignore[method-assign]
    return calls


def main(request_json: str) -> None:
    global CAPABILITY
    import os

    req = json.loads(request_json)
    gpu = simulate.GPUS[req["gpu"]]
    CAPABILITY = gpu.capability
    simulate.install(gpu)
    if torch.cuda._maybe_exchange_device is torch.cuda._exchange_device:
        # Dynamo keys its torch.cuda handlers by function and asserts that these
        # two differ; give the simulated one its own function object.
        exchange = torch.cuda._exchange_device
        torch.cuda._maybe_exchange_device = lambda device: exchange(device)
    if req["mode"] in ("import", "cold"):
        os.environ.pop("FLASHINFER_NVCC_VERSION", None)
        os.environ["FLASHINFER_WORKSPACE_BASE"] = req["tmp"]
        calls = _spy_subprocesses()
    dynamo_before_import = "torch._dynamo" in sys.modules
    import flashinfer

    res: dict[str, Any] = {"version": flashinfer.__version__}
    try:
        if req["mode"] == "import":
            res["import_subprocesses"] = list(calls)
            # Does `import flashinfer` import torch._dynamo (seconds, in every process)?
            res["dynamo"] = {"before": dynamo_before_import, "after": "torch._dynamo" in sys.modules}
            import inspect

            import flashinfer.compilation_context as cc

            # Does CompilationContext() ask for the CUDA version (at import)?
            res["arch_at_import"] = "is_cuda_version_at_least" in inspect.getsource(cc)
        if req["mode"] == "cold":
            res["cold"] = cold_check(req["tmp"], calls)
        if req["mode"] == "trace":
            res["cases"] = trace_all(
                req["version"], req["patched"], req["dynamic"], req.get("only")
            )
        if req["mode"] == "export":
            res["cases"] = export_all(req["version"], req.get("only"))
        if req["mode"] == "eager":
            stub_jit(req["tmp"])
            res["cases"] = eager_all(req["version"], req.get("only"))
        if req["mode"] == "opcheck":
            stub_jit(req["tmp"])
            res["cases"] = opcheck_all(req["version"], req.get("only"))
        if req["mode"] == "cudnn-plans":
            stub_jit(req["tmp"])
            res["plans"] = cudnn_plan_check()
        if req["mode"] == "warmup":
            built = stub_jit(req["tmp"])
            res["select"] = select_check(built)
            names = flashinfer.fp4_warmup(torch.device("cuda", 0))
            again = flashinfer.fp4_warmup()
            res["warmup"] = {"names": names, "built": list(built), "again": again}
            res["jit_error"] = jit_error_check()
            res["arch"] = arch_check(built)
    except Exception:
        res["crash"] = traceback.format_exc()
    print("RESULT:" + json.dumps(res))
    sys.stdout.flush()
