"""What cannot exist on a CPU, for the whole-model simulation (child side).

Each function installs one stand-in, process-wide; :mod:`modelsim` lists them all.
Nothing here replaces sglang's model, layer, compilation or runner code, nor
FlashInfer's Python: only compiled kernels and their loaders, the CUDA runtime
(streams, events, graphs, memory queries) and the attention kernels.
"""

from __future__ import annotations

import contextlib
import json
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from harness.models import capturing, collectives

# --- sgl_kernel's compiled library --------------------------------------------------


def _moe_fused_gate(x: torch.Tensor, bias: torch.Tensor, num_expert_group: int, topk_group: int,
                    topk: int, num_fused_shared_experts: int, *rest: Any) -> list[torch.Tensor]:
    # csrc/moe/moe_fused_gate.cu: (topk_weights float32, topk_ids int32), each
    # [tokens, topk + num_fused_shared_experts].
    rows, k = x.shape[0], topk + num_fused_shared_experts
    return [
        torch.empty(rows, k, dtype=torch.float32, device=x.device),
        torch.empty(rows, k, dtype=torch.int32, device=x.device),
    ]


def _kimi_gate(x: torch.Tensor, bias: torch.Tensor, topk: int, *rest: Any) -> list[torch.Tensor]:
    rows = x.shape[0]
    return [
        torch.empty(rows, topk, dtype=torch.float32, device=x.device),
        torch.empty(rows, topk, dtype=torch.int32, device=x.device),
    ]


def _scaled_mm(a: torch.Tensor, b: torch.Tensor, sa: Any, sb: Any, out_dtype: torch.dtype,
               *rest: Any) -> torch.Tensor:
    return torch.empty(a.shape[0], b.shape[1], dtype=out_dtype, device=a.device)


# --- FlashMLA (sgl_kernel/flashmla_ops) and DeepGEMM (deep_gemm/deep_gemm_cpp) -----------
# Shapes from the C++ entry points (FlashMLA csrc/flash_api.cpp as sgl-kernel builds it,
# DeepGEMM csrc/apis/attention.hpp); dtypes as the kernels write them.

_FLASHMLA_BLOCK_M = 64  # FlashMLA's decode tile over q heads
_TILE_SCHEDULER_METADATA_SIZE = 8


def _mla_decoding_metadata(seqlens_k: torch.Tensor, num_q_tokens_per_head_k: int, h_k: int,
                           *rest: Any) -> list[torch.Tensor]:
    # get_mla_decoding_metadata: num_sm_parts = sm_count / h_k / ceil(q tokens per k head / 64).
    sms = torch.cuda.get_device_properties().multi_processor_count
    parts = max(1, sms // h_k // -(-num_q_tokens_per_head_k // _FLASHMLA_BLOCK_M))
    batch = seqlens_k.shape[0]
    return [
        torch.empty(parts, _TILE_SCHEDULER_METADATA_SIZE, dtype=torch.int32, device=seqlens_k.device),
        torch.empty(batch + 1, dtype=torch.int32, device=seqlens_k.device),
    ]


def _mla_decode(q: torch.Tensor, kv_cache: torch.Tensor, head_size_v: int, *rest: Any) -> list[torch.Tensor]:
    # fwd_kvcache_mla(_fp8): out [b, s_q, h_q, head_size_v] (bf16), softmax_lse [b, h_q, s_q] f32.
    b, s_q, h_q, _ = q.shape
    out_dtype = torch.bfloat16 if q.dtype == torch.float8_e4m3fn else q.dtype
    return [
        torch.empty(b, s_q, h_q, head_size_v, dtype=out_dtype, device=q.device),
        torch.empty(b, h_q, s_q, dtype=torch.float32, device=q.device),
    ]


def _sparse_prefill(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float,
                    d_v: int) -> list[torch.Tensor]:
    # sparse_prefill_fwd: out [s_q, h_q, d_v] bf16, max_logits and lse [s_q, h_q] f32.
    s_q, h_q, _ = q.shape
    return [
        torch.empty(s_q, h_q, d_v, dtype=torch.bfloat16, device=q.device),
        torch.empty(s_q, h_q, dtype=torch.float32, device=q.device),
        torch.empty(s_q, h_q, dtype=torch.float32, device=q.device),
    ]


def _align(x: int, to: int) -> int:
    return -(-x // to) * to


def _mqa_logits(q: torch.Tensor, kv: Any, weights: torch.Tensor, ks: torch.Tensor, ke: torch.Tensor,
                clean_logits: bool = True, max_seqlen_k: int = 0) -> torch.Tensor:
    # fp8_mqa_logits: float32 [seq_len, seq_len_kv] (or max_seqlen_k), a view of an
    # [align(seq_len, 128 / heads), aligned stride] buffer.
    seq_len, heads, _ = q.shape
    seq_len_kv = kv[0].shape[0]
    if max_seqlen_k == 0:
        stride, cols = _align(seq_len_kv + 256, 64), seq_len_kv
    else:
        stride, cols = _align(max_seqlen_k, 256), max_seqlen_k
    rows = _align(seq_len, max(1, 128 // heads))
    return torch.empty(rows, stride, dtype=torch.float32, device=q.device)[:seq_len, :cols]


def _paged_mqa_logits_metadata(context_lens: torch.Tensor, block_kv: int, num_sms: int) -> torch.Tensor:
    return torch.empty(num_sms + 1, 2, dtype=torch.int32, device=context_lens.device)


def _paged_mqa_logits(q: torch.Tensor, kv_cache: torch.Tensor, weights: torch.Tensor, context_lens: torch.Tensor,
                      block_table: torch.Tensor, schedule_meta: torch.Tensor, max_context_len: int,
                      clean_logits: bool = False) -> torch.Tensor:
    # fp8_paged_mqa_logits: float32 [batch * next_n, max_context_len] of an aligned buffer.
    batch, next_n = q.shape[0], q.shape[1]
    buffer = torch.empty(batch * next_n, _align(max_context_len, 256), dtype=torch.float32, device=q.device)
    return buffer[:, :max_context_len]


# The ops whose schema returns tensors, with what the C++ op returns (csrc/ of the
# release), per namespace; every `-> ()` op writes into its `Tensor!` arguments only.
RETURNS: dict[str, dict[str, Callable[..., Any]]] = {
    "sgl_kernel": {
        "weak_ref_tensor": lambda t: torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device),
        "moe_fused_gate": _moe_fused_gate,
        "kimi_k2_moe_fused_gate": _kimi_gate,
        "fp8_scaled_mm": _scaled_mm,
        "int8_scaled_mm": _scaled_mm,
        "fp8_blockwise_scaled_mm": _scaled_mm,
        "get_mla_decoding_metadata": _mla_decoding_metadata,
        "fwd_kvcache_mla": _mla_decode,
        "fwd_kvcache_mla_fp8": _mla_decode,
        "sparse_prefill_fwd": _sparse_prefill,
    },
    "deep_gemm": {
        "fp8_mqa_logits": _mqa_logits,
        "get_paged_mqa_logits_metadata": _paged_mqa_logits_metadata,
        "fp8_paged_mqa_logits": _paged_mqa_logits,
    },
}
RETURNS["sgl_kernel"].update(collectives.RETURNS)
# Ops writing into their ``Tensor!`` outputs that do more than nothing: the custom
# all-reduce kernel runs its collective (tests/harness/models/collectives.py).
WRITES: dict[str, dict[str, Callable[..., Any]]] = {"sgl_kernel": dict(collectives.WRITES)}
# Ops without tensor arguments (no device to dispatch on): the device's answer.
NO_TENSOR_OPS: dict[str, dict[str, Callable[..., Any]]] = {
    "deep_gemm": {
        "init": lambda library_root, cuda_home: None,
        "get_num_sms": lambda: torch.cuda.get_device_properties().multi_processor_count,
        "set_num_sms": lambda n: None,
        "get_compile_mode": lambda: 0,
        "set_compile_mode": lambda mode: None,
        # sgl-deep-gemm 0.2+ (TORCH_LIBRARY): its runtime settings, DeepGEMM's defaults.
        "get_tc_util": lambda: 100,
        "set_tc_util": lambda value: None,
        "get_pdl": lambda: False,
        "set_pdl": lambda value: None,
        "get_deterministic_algorithms": lambda: False,
        "use_deterministic_algorithms": lambda value: None,
        "set_ignore_compile_dims": lambda value: None,
        "set_block_size_multiple_of": lambda m, n: None,
        "get_mk_alignment_for_contiguous_layout": lambda: 128,
        "get_theoretical_mk_alignment_for_contiguous_layout": lambda expected_m=None, num_groups=None: 128,
        "get_tma_aligned_size": lambda mn, element_size: (mn + 16 // element_size - 1)
        // (16 // element_size) * (16 // element_size),
    },
    "sgl_kernel": dict(collectives.NO_TENSOR_OPS),
}


# Every eager call of a stood-in compiled op ("namespace::name"), in order: a split op's
# body, the decode runner's and the warm-up's forwards; not the shape propagation of a
# trace (Dynamo, AOTAutograd), which runs the same Meta kernel inside a TracingContext.
KERNEL_CALLS: list[str] = []
# The same calls with the rows (first dimension) of their first tensor argument.
KERNEL_SHAPES: list[tuple[str, int]] = []


def _meta_kernel(namespace: str, name: str, returns_nothing: bool) -> Callable[..., Any]:
    qualified = f"{namespace}::{name}"

    def recorded(fn: Callable[..., Any]) -> Callable[..., Any]:
        def kernel(*args: Any, **kwargs: Any) -> Any:
            if torch._guards.TracingContext.try_get() is None:
                KERNEL_CALLS.append(qualified)
                first = next((a for a in args if isinstance(a, torch.Tensor) and a.dim() > 0), None)
                if first is not None and isinstance(first.shape[0], int):
                    KERNEL_SHAPES.append((qualified, first.shape[0]))
            return fn(*args, **kwargs)

        return kernel

    if returns_nothing:
        return recorded(WRITES.get(namespace, {}).get(name, lambda *args, **kwargs: None))
    if name in RETURNS.get(namespace, {}):
        return recorded(RETURNS[namespace][name])

    def missing(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"{namespace}::{name} returns tensors and tests/harness/models/stand_ins.py RETURNS has no "
            "shape function for it: add one from the op's C++ source"
        )

    return missing


def _define(namespace: str, schemas: list[str], meta: dict[str, torch.library.Library]) -> torch.library.Library:
    """Every schema defined in torch.library, with a Meta kernel (or, for an op without
    tensor arguments, a CompositeExplicitAutograd one) registered in its own library."""
    definitions = torch.library.Library(namespace, "FRAGMENT")
    for schema in schemas:
        parsed = torch._C.parse_schema(schema)
        definitions.define(schema)
        lib = torch.library.Library(namespace, "FRAGMENT")
        if parsed.name in NO_TENSOR_OPS.get(namespace, {}):
            lib.impl(parsed.name, NO_TENSOR_OPS[namespace][parsed.name], "CompositeExplicitAutograd")
        else:
            lib.impl(parsed.name, _meta_kernel(namespace, parsed.name, not parsed.returns), "Meta")
        meta[f"{namespace}::{parsed.name}"] = lib
    return definitions


def install_sgl_kernel_ops(record: dict[str, Any]) -> types.ModuleType:
    """``common_ops``: every schema of the record defined in torch.library, with a Meta kernel.

    sgl_kernel's ``load_utils`` finds no ``common_ops.*`` library beside its Python
    and falls back to ``import common_ops``: this module.  The record's other
    libraries (FlashMLA's ``sgl_kernel.flashmla_ops``, DeepGEMM's
    ``deep_gemm.deep_gemm_cpp``: the ops NSA attention calls) become modules of those
    names defining their schemas the same way, so the wheel's own Python packages
    import over them.  A fake sglang registers itself (``torch.library.register_fake``,
    e.g. ``register_fake_if_exists``) replaces the op's Meta kernel (torch 2.9 refuses
    a fake beside a Meta kernel).
    """
    namespace = record["namespace"]
    meta: dict[str, torch.library.Library] = {}
    recorded = {torch._C.parse_schema(s).name for s in record["schemas"]}
    inferred = [s for s in collectives.INFERRED_SCHEMAS if torch._C.parse_schema(s).name not in recorded]
    definitions = [_define(namespace, [*record["schemas"], *inferred], meta)]
    torch_libraries = [lib for c in record.get("companions", []) for lib in c.get("torch_libraries", [])]
    for lib in torch_libraries:  # sgl-deep-gemm 0.2+: deep_gemm/_C.so (torch.ops.load_library)
        definitions.append(_define(lib["namespace"], lib["schemas"], meta))
        TORCH_LIBRARIES.add(lib["library"])
    for extra in record.get("extra_libraries", []):
        definitions.append(_define(extra["namespace"], extra["schemas"], meta))
        library = types.ModuleType(extra["module"])
        library.__file__ = f"<stand-in for {extra['library']} of {record['project']} {record['version']}>"
        sys.modules[extra["module"]] = library

    register_fake = torch.library.register_fake

    def register_fake_(op: Any, *args: Any, **kwargs: Any) -> Any:
        name = op if isinstance(op, str) else getattr(op, "__qualname__", "")
        if isinstance(name, str) and "::" in name:
            lib = meta.pop(name.split(".")[0], None)
            if lib is not None:
                lib._destroy()
        return register_fake(op, *args, **kwargs)

    torch.library.register_fake = register_fake_  # type: ignore[assignment]
    module = types.ModuleType("common_ops")
    module.__file__ = f"<stand-in for {record['library']} of {record['project']} {record['version']}>"
    module._libraries = (definitions, meta)  # keep the registrations alive
    module.defined = sorted(name.split("::", 1)[1] for name in meta if name.startswith(f"{namespace}::"))
    sys.modules["common_ops"] = module
    return module


@contextlib.contextmanager
def no_compiled_sgl_kernel() -> Iterator[None]:
    """While sgl_kernel imports from an installed wheel, its loader
    (``load_utils._load_architecture_specific_ops``) finds no loadable ``common_ops``
    library (the wheel's holds CUDA kernels) and falls back to ``import common_ops``: the
    stand-in of :func:`install_sgl_kernel_ops`, as beside the Python-only tree."""
    import importlib.util

    real = importlib.util.spec_from_file_location

    def spec_from_file_location(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "common_ops" else real(name, *args, **kwargs)

    importlib.util.spec_from_file_location = spec_from_file_location  # type: ignore[assignment]
    try:
        yield
    finally:
        importlib.util.spec_from_file_location = real


# DeepGEMM as a tvm-ffi module (sgl-deep-gemm, sglang 0.5.12+): the functions of its
# ``_C`` that return tensors or answer without one, with the parameters ``deep_gemm``'s
# Python passes them (DeepGEMM csrc/apis/attention.hpp, the same kernels as above).
TVM_FFI_DEEP_GEMM: dict[str, Callable[..., Any]] = {
    "fp8_mqa_logits": lambda q, kv, kv_sf, weights, ks, ke, clean_logits=False, max_seqlen_k=0: _mqa_logits(
        q, (kv, kv_sf), weights, ks, ke, clean_logits, max_seqlen_k),
    "get_paged_mqa_logits_metadata": lambda context_lens, block_kv, num_sms, indices=None: (
        _paged_mqa_logits_metadata(context_lens, block_kv, num_sms)),
    "fp8_paged_mqa_logits": lambda q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
    clean_logits=False, indices=None: _paged_mqa_logits(
        q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits),
    "get_num_sms": lambda: torch.cuda.get_device_properties().multi_processor_count,
    "get_mk_alignment_for_contiguous_layout": lambda: 128,  # DeepGEMM's contiguous-layout M alignment
    "get_tc_util": lambda: 100,
}


class TvmFfiDeepGemm(types.ModuleType):
    """DeepGEMM's compiled ``_C`` (a tvm-ffi module): every function records its eager
    call as ``deep_gemm::<name>`` and returns what :data:`TVM_FFI_DEEP_GEMM` says (others
    write into their outputs only: nothing).  Dynamo cannot trace a tvm-ffi function; each
    of these is ``torch._dynamo.disable``-d, so a trace that reaches one fails (under
    ``fullgraph=True``) as it would on the real module."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("__"):
            raise AttributeError(name)
        body = TVM_FFI_DEEP_GEMM.get(name, lambda *args, **kwargs: None)
        qualified = f"deep_gemm::{name}"

        def kernel(*args: Any, **kwargs: Any) -> Any:
            KERNEL_CALLS.append(qualified)
            first = next((a for a in args if isinstance(a, torch.Tensor) and a.dim() > 0), None)
            if first is not None and isinstance(first.shape[0], int):
                KERNEL_SHAPES.append((qualified, first.shape[0]))
            return body(*args, **kwargs)

        function = torch._dynamo.disable(kernel, reason=f"{qualified} is a tvm-ffi function")
        setattr(self, name, function)
        return function


def _import_tvm_ffi_deep_gemm(toolkit_dir: str) -> None:
    """sgl-deep-gemm's ``deep_gemm`` loads its ``_C.so`` with ``tvm_ffi.load_module``, or
    builds it first with ``tvm_ffi.cpp.build`` (nvcc) where the file is absent (the
    Python-only tree): here the build writes an empty file and the load returns a
    :class:`TvmFfiDeepGemm`.  The package is imported from a copy under ``toolkit_dir``,
    where its build step copies the library it built."""
    import importlib.util
    import os
    import shutil

    import tvm_ffi
    import tvm_ffi.cpp

    spec = importlib.util.find_spec("deep_gemm")
    if spec is None or spec.origin is None:
        return
    copy = os.path.join(toolkit_dir, "deep-gemm-python")
    shutil.copytree(os.path.dirname(spec.origin), os.path.join(copy, "deep_gemm"), dirs_exist_ok=True)
    sys.path.insert(0, copy)
    real_load, real_build = tvm_ffi.load_module, tvm_ffi.cpp.build

    def build(name: str, *args: Any, build_directory: str, **kwargs: Any) -> str:
        JIT_BUILT.append(f"deep_gemm.{name}")
        path = os.path.join(build_directory, f"{name}.so")
        open(path, "wb").close()
        return path

    def load_module(path: str, *args: Any, **kwargs: Any) -> Any:
        if os.path.dirname(os.path.abspath(path)) == os.path.join(copy, "deep_gemm"):
            return TvmFfiDeepGemm("deep_gemm._C")
        return real_load(path, *args, **kwargs)

    tvm_ffi.cpp.build, tvm_ffi.load_module = build, load_module
    try:
        import deep_gemm  # noqa: F401
    finally:
        tvm_ffi.cpp.build = real_build


# The TORCH_LIBRARY libraries of the record whose ops are defined by the stand-in
# (``deep_gemm/_C.so`` of sgl-deep-gemm 0.2+), by their path inside the wheel.
TORCH_LIBRARIES: set[str] = set()


def _import_torch_library_deep_gemm(toolkit_dir: str) -> None:
    """sgl-deep-gemm 0.2+'s ``deep_gemm`` loads ``_C.so`` with ``torch.ops.load_library``
    (building it first with the host compiler where it is absent: the Python-only tree).
    Its ops are defined from the record (:func:`install_sgl_kernel_ops`): the package is
    imported from a copy under ``toolkit_dir`` beside an empty ``_C.so`` whose load is a
    no-op."""
    import importlib.util
    import os
    import shutil

    spec = importlib.util.find_spec("deep_gemm")
    if spec is None or spec.origin is None:
        return
    copy = os.path.join(toolkit_dir, "deep-gemm-python")
    package = os.path.join(copy, "deep_gemm")
    shutil.copytree(os.path.dirname(spec.origin), package, dirs_exist_ok=True)
    open(os.path.join(package, "_C.so"), "wb").close()
    sys.path.insert(0, copy)
    real_load = torch.ops.load_library

    def load_library(path: str) -> None:
        if os.path.dirname(os.path.abspath(path)) != package:
            real_load(path)

    torch.ops.load_library = load_library  # type: ignore[method-assign]
    try:
        import deep_gemm  # noqa: F401
    finally:
        torch.ops.load_library = real_load  # type: ignore[method-assign]


def import_deep_gemm(toolkit_dir: str) -> None:
    """Import the wheel's ``deep_gemm`` Python over its stand-in library (see
    :func:`install_sgl_kernel_ops`), or sgl-deep-gemm's over a stand-in ``_C``
    (:func:`_import_tvm_ffi_deep_gemm`).  Its import looks for a CUDA toolkit to hand to the
    JIT compiler (``CUDA_HOME`` or ``nvcc`` on PATH, else asserts): the stand-in ``init``
    receives ``toolkit_dir`` where neither exists; nothing is compiled."""
    import os

    tvm_ffi_module = "deep_gemm.deep_gemm_cpp" not in sys.modules
    saved = os.environ.get("CUDA_HOME")
    os.environ.setdefault("CUDA_HOME", toolkit_dir)
    try:
        if "deep_gemm/_C.so" in TORCH_LIBRARIES:
            _import_torch_library_deep_gemm(toolkit_dir)
        elif tvm_ffi_module:
            _import_tvm_ffi_deep_gemm(toolkit_dir)
        else:
            import deep_gemm  # noqa: F401
    finally:
        if saved is None:
            os.environ.pop("CUDA_HOME", None)


# --- JIT-compiled kernels (FlashInfer, sglang.jit_kernel) -----------------------------


class NoKernel:
    """A loaded kernel module whose every function is a no-op (the kernels write into
    outputs their Python allocated; on a CPU there is nothing to run)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


JIT_BUILT: list[str] = []


def install_tvm_ffi_compiler() -> None:
    """sglang.jit_kernel compiles and loads with ``tvm_ffi.cpp.load_inline`` / ``load``
    (nvcc + dlopen): record the module name, return a module of no-op kernels."""
    try:
        import tvm_ffi.cpp as cpp
    except ImportError:
        return

    def load(name: str, *args: Any, **kwargs: Any) -> NoKernel:
        JIT_BUILT.append(name)
        return NoKernel(name)

    cpp.load_inline = load
    cpp.load = load
    install_sglang_jit_loader()


def install_sglang_jit_loader() -> None:
    """sglang 0.5.18+ compile their JIT kernels with their own loader
    (``kernels/jit/utils/compile/loader.py`` ``load_jit``: ninja + nvcc in
    ``compile/ninja.py`` ``build``, then ``tvm_ffi.load_module`` in ``loader._load``):
    the build records the module name and leaves an empty library, the load returns a
    module of no-op kernels.  The loader's own cache logic runs (in the case's
    ``SGLANG_JIT_CACHE_DIR``)."""
    try:
        from sglang.kernels.jit.utils.compile import loader, ninja
    except ImportError:
        return

    def build(*, spec: Any, build_dir: Any, build_file: str) -> Any:
        JIT_BUILT.append(spec.module_name)
        build_dir.mkdir(parents=True, exist_ok=True)
        library = build_dir / f"{spec.module_name}.so"
        library.write_bytes(b"")
        return library

    ninja.build = build
    loader._load = lambda library: (
        ClusterProbe() if CLUSTER_PROBE in library.stem else NoKernel(library.stem)
    )


# sglang 0.5.21+'s JIT probe module (kernels/jit/utils/occupancy.py, csrc occupancy/cluster_probe.cuh).
CLUSTER_PROBE = "occupancy_cluster_probe"
PORTABLE_CLUSTER_SIZE = 8


class ClusterProbe:
    """The JIT occupancy probe (``get_max_active_clusters``: the driver's
    ``cudaOccupancyMaxActiveClusters`` for a dummy kernel pinned at ``occupancy`` blocks
    per SM), answered for the simulated device: a portable width (up to 8 blocks) gets
    the SM-count bound, ``SMs x occupancy // cluster_size`` (the driver's answer can fall
    short of it where a cluster does not divide a GPC evenly); a non-portable width 0,
    as the probe's callers assume without a positive probe (``topk_v2.cuh``'s default
    ``SGL_TOPK_V2_MAX_C16_OCC1 0``).  sglang passes the answers to nvcc as -D flags of
    the top-k module (``dsv4/topk.py`` ``_jit_topk_v2_module``), a no-op module here:
    no Python reads them."""

    def get_max_active_clusters(self, cluster_size: int, occupancy: int) -> int:
        if cluster_size > PORTABLE_CLUSTER_SIZE:
            return 0
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count * occupancy // cluster_size


TRITON_LAUNCHES: list[str] = []


CUTE_COMPILED: list[str] = []


def install_cute_dsl_compiler() -> None:
    """The CuTe DSL's JIT (nvidia-cutlass-dsl, which FlashInfer 0.6.8 requires: its norm
    kernels compile through it where it is installed): ``cute.compile`` lowers a kernel to
    a cubin and loads it through the CUDA driver; here it records the kernel's class and
    returns a kernel that does nothing (the caller allocated the outputs).  Without the
    package (the test venv) FlashInfer takes its CUDA JIT path, :func:`install_flashinfer_jit`'s."""
    try:
        import cutlass.cute as cute
    except Exception:  # noqa: BLE001 - not installed, or not importable on this machine
        return

    def compile_(kernel: Any, *args: Any, **kwargs: Any) -> Callable[..., None]:
        CUTE_COMPILED.append(type(kernel).__name__)
        return lambda *call_args, **call_kwargs: None

    cute.compile = compile_


def install_triton_launcher() -> None:
    """A Triton kernel launched eagerly on fake CUDA tensors (``kernel[grid](...)``, e.g.
    the NSA indexer's ``act_quant`` outside a traced piece) is recorded and not run: there
    is no device to compile for, and the kernel writes only into tensors its Python
    allocated.  Traced launches never get here: Dynamo turns them into Triton HOPs, whose
    fake rule is torch's own.  Launches on real tensors run as before."""
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return
    real = JITFunction.run

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        if any(_is_fake_cuda(a) for a in (*args, *kwargs.values())):
            TRITON_LAUNCHES.append(getattr(self, "__name__", str(self)))
            return None
        return real(self, *args, grid=grid, warmup=warmup, **kwargs)

    JITFunction.run = run  # type: ignore[method-assign]


INDUCTOR_GRAPHS: list[int] = []


def install_inductor_codegen() -> None:
    """``torch.compile(backend="inductor")`` regions sglang runs eagerly (e.g.
    ``biased_grouped_topk_impl``, the grouped top-k of 256-expert, one-group routing):
    Dynamo traces them as it would, and the captured graph runs as traced, instead of
    Inductor generating and compiling Triton for a device that is not there.  (The
    piecewise runner's own compiler is "eager": untouched.)"""
    from torch._inductor import compile_fx as inductor

    def compile_fx(model: Any, example_inputs: Any, *args: Any, **kwargs: Any) -> Any:
        INDUCTOR_GRAPHS.append(len(model.graph.nodes))
        return model.forward

    inductor.compile_fx = compile_fx  # type: ignore[assignment]


def install_flashinfer_jit(tmp: str, *, toolkit: bool = False) -> list[str]:
    """FlashInfer's JIT build and load (nvcc, ninja, dlopen) and its cubin downloads:
    the stand-ins of tests/harness (``moe_child.stub_kernels``: no-op kernels, the
    cutlass fused-MoE runner object, TVM FFI tensors passed through; tests/harness on the
    child's path: :data:`simulation.CHILD_PATH`).  ``toolkit``: the version a build reads
    is the ``nvcc`` on CUDA_HOME's answer, as for a user (else our series read 12.9)."""
    import fi_child
    import moe_child

    return moe_child.stub_kernels(tmp, nvcc=None if toolkit else fi_child.NVCC_VERSION)


def flashinfer_toolkit() -> dict[str, Any]:
    """What FlashInfer's JIT read of the toolkit on CUDA_HOME (``get_cuda_version``, cached:
    no second ``nvcc``) and the SM targets it gave the device (its compilation context)."""
    from flashinfer.jit import core, cpp_ext

    archs = core.current_compilation_context.TARGET_CUDA_ARCHS
    return {"nvcc": str(cpp_ext.get_cuda_version()), "archs": sorted(f"{a}.{b}" for a, b in archs)}


# --- sglang's split ops ----------------------------------------------------------------

CUDA_BODIES: dict[str, Callable[..., Any]] = {}
SPLIT_OP_CALLS: list[str] = []


def record_cuda_bodies() -> None:
    """Remember the CUDA implementation sglang registers for each of its custom ops
    (``Library.impl(name, fn, "CUDA")``; call before sglang is imported)."""
    impl = torch.library.Library.impl

    def impl_(self: Any, op_name: Any, fn: Any, dispatch_key: str = "", *args: Any, **kwargs: Any) -> Any:
        if self.ns == "sglang" and dispatch_key == "CUDA" and isinstance(op_name, str):
            CUDA_BODIES[op_name] = fn
        return impl(self, op_name, fn, dispatch_key, *args, **kwargs)

    torch.library.Library.impl = impl_  # type: ignore[method-assign]


def run_split_op_bodies(split_ops: list[str], calls: list[str] | None = None) -> list[str]:
    """A split op called eagerly on fake CUDA tensors runs its CUDA implementation (the
    Python body sglang registered), as the piecewise backend runs it between captured
    pieces on a GPU; inside a trace (Dynamo, AOTAutograd) its fake runs as before.
    Without this, FakeTensorMode would answer every call with the op's fake and the
    body (the attention backend call, the NSA indexer's k-cache store and top-k) would
    never run.  sglang's collective ops (``outplace_all_reduce`` & co.) are wired the
    same way: run eagerly (a piece's warm-up and capture runs, an eager forward) their
    body picks the path (custom all-reduce, pynccl, torch.distributed) and ends in a
    stand-in kernel.  Each eager call is appended to ``calls`` (default
    :data:`SPLIT_OP_CALLS`).  Returns the ops so wired."""
    if calls is None:
        calls = SPLIT_OP_CALLS
    from torch._library import simple_registry

    wired = []
    for qualified in split_ops:
        name = qualified.split(".", 1)[1]
        body = CUDA_BODIES.get(name)
        kernel = simple_registry.singleton.find(f"sglang::{name}").fake_impl.kernel
        if body is None or kernel is None or getattr(kernel.func, "_runs_body", False):
            continue
        fake = kernel.func

        def fake_or_body(*args: Any, _fake: Any = fake, _body: Any = body, _name: str = name,
                         _calls: list[str] = calls, **kwargs: Any) -> Any:
            if torch._guards.TracingContext.try_get() is not None:
                return _fake(*args, **kwargs)
            _calls.append(_name)
            return _body(*args, **kwargs)

        fake_or_body._runs_body = True  # type: ignore[attr-defined]
        kernel.func = fake_or_body
        wired.append(name)
    return wired


# --- the CUDA runtime -------------------------------------------------------------------


class Stream:
    """torch.cuda.Stream / Event on a machine without a CUDA runtime."""

    cuda_stream = 0

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device())

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_stream(self, other: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> Any:
        return event or Stream()

    def record(self, stream: Any = None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, other: Any) -> float:
        return 0.0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream)

    def __hash__(self) -> int:
        return 0


class CUDAGraph:
    """A CUDA graph that captures nothing but the collectives run in its capture: the body
    ran on fake tensors; a replay runs those collectives again (gloo, the real thing
    across ranks), as a replay on GPUs runs the NCCL / custom all-reduce kernels it holds."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.captured = False
        self.collectives: list[collectives.Collective] = []

    def capture_begin(self, *args: Any, **kwargs: Any) -> None:
        pass

    def capture_end(self) -> None:
        self.captured = True

    def replay(self) -> None:
        collectives.replay(self.collectives)

    def reset(self) -> None:
        self.collectives = []

    def pool(self) -> tuple[int, int]:
        return (0, 0)

    def enable_debug_mode(self) -> None:
        pass


CAPTURES: list[str] = []


class graph:
    """``torch.cuda.graph(g, pool=..., stream=...)``: run the body (on fake tensors)."""

    def __init__(self, cuda_graph: CUDAGraph, pool: Any = None, stream: Any = None, **kwargs: Any) -> None:
        self.cuda_graph = cuda_graph

    def __enter__(self) -> None:
        capturing.begin()
        self.start = len(collectives.LOG)

    def __exit__(self, *exc: Any) -> None:
        capturing.end()
        self.cuda_graph.collectives = [c for c in collectives.LOG[self.start :] if c.phase == "captured"]
        self.cuda_graph.capture_end()
        CAPTURES.append("graph")


@contextlib.contextmanager
def _stream_context(stream: Any = None) -> Iterator[None]:
    yield


def _fake_cuda_tensor_factory() -> Callable[..., torch.Tensor]:
    """``torch.tensor(data, device="cuda")`` copies host data to the device, which a
    CPU build of torch refuses before FakeTensorMode sees the call: build the host
    tensor, then a fake CUDA tensor of its shape and dtype (a fake holds no data)."""
    real = torch.tensor
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._device import DeviceContext

    def default_device() -> torch.device:
        for mode in reversed(_get_current_function_mode_stack()):
            if isinstance(mode, DeviceContext):
                return torch.device(mode.device)
        return torch.device("cpu")

    def tensor(data: Any, *args: Any, device: Any = None, **kwargs: Any) -> torch.Tensor:
        target = torch.device(device) if device is not None else default_device()
        if target.type != "cuda":
            return real(data, *args, device=device, **kwargs)
        kwargs.pop("pin_memory", None)
        host = real(data, *args, device="cpu", **kwargs)
        return torch.empty_strided(host.shape, host.stride(), dtype=host.dtype, device=target)

    return tensor


def _is_fake_cuda(t: Any) -> bool:
    """A fake CUDA tensor, or (on a CPU build of torch, where no other CUDA tensor can
    exist) a wrapper of one, e.g. AOTAutograd's FunctionalTensor."""
    if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
        return False
    return isinstance(t, torch._subclasses.fake_tensor.FakeTensor) or not torch.backends.cuda.is_built()


def _index_ops(self: torch.Tensor, idx: Any) -> tuple[torch.Tensor, list[Any] | None]:
    """Python indexing of ``self`` as aten ops: (the basic-indexed view, the advanced
    indices for aten.index per remaining dim, or None)."""
    aten = torch.ops.aten
    items = list(idx) if isinstance(idx, tuple) else [idx]
    items = [torch.tensor(i) if isinstance(i, list) else i for i in items]
    if any(i is Ellipsis for i in items):
        at = items.index(Ellipsis)
        used = sum(1 for i in items if i is not None and i is not Ellipsis)
        items[at : at + 1] = [slice(None)] * (self.dim() - used)
    x, dim, advanced = self, 0, []
    for item in items:
        if item is None:
            x = aten.unsqueeze.default(x, dim)
            advanced.append(None)
            dim += 1
        elif isinstance(item, bool) or (isinstance(item, torch.Tensor) and item.dtype == torch.bool and item.dim() == 0):
            raise NotImplementedError("boolean scalar index of a fake CUDA tensor")
        elif isinstance(item, int) or (isinstance(item, torch.SymInt)):
            if any(isinstance(a, torch.Tensor) for a in advanced):
                raise NotImplementedError("integer index after a tensor index of a fake CUDA tensor")
            x = aten.select.int(x, dim, item)
        elif isinstance(item, slice):
            start = 0 if item.start is None else item.start
            stop = sys.maxsize if item.stop is None else item.stop
            x = aten.slice.Tensor(x, dim, start, stop, 1 if item.step is None else item.step)
            advanced.append(None)
            dim += 1
        elif isinstance(item, torch.Tensor):
            advanced.append(item)
            dim += 1 if item.dtype != torch.bool else item.dim()
        else:
            raise NotImplementedError(f"index {item!r} of a fake CUDA tensor")
    if not any(isinstance(a, torch.Tensor) for a in advanced):
        return x, None
    return x, advanced


def install_cuda_visible_to_traced_code() -> None:
    """``torch.cuda.is_available()`` as the model code Dynamo traces sees it: True, as on the
    server's GPU.  The simulated GPU is hidden while Dynamo compiles
    (``fp4graph.verify.simulate.compiling``: Dynamo saves the CUDA RNG state when CUDA is
    available), and Dynamo folds user code's call to a constant by calling it
    (``torch/_dynamo/variables/torch.py``, ``constant_fold_functions``), ignoring the
    ``lru_cache`` of sglang's ``is_cuda()`` (``srt/utils/common.py``), so traced sglang code
    took its non-CUDA branches: 0.5.16+ route NSA prefill to the indexer's split op only
    where ``is_cuda()`` (``layers/attention/dsa/utils.py:103``).  Dynamo's own RNG
    bookkeeping still sees the GPU hidden."""
    from torch._dynamo.variables import torch as dynamo_torch

    hidden = torch.cuda.is_available
    folding = dynamo_torch.__file__

    def is_available() -> bool:
        if sys._getframe(1).f_code.co_filename == folding:
            return True
        return hidden()

    dynamo_torch.constant_fold_functions[is_available] = None
    torch.cuda.is_available = is_available


def install_fake_cuda_indexing() -> None:
    """Python indexing, ``Tensor.copy_``, ``Tensor.contiguous`` and ``~`` of a fake CUDA
    tensor go through C++ CUDA device guards a CPU build of torch refuses; the same aten
    ops go through FakeTensorMode."""
    getitem, setitem, copy = torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.copy_
    invert, contiguous = torch.Tensor.__invert__, torch.Tensor.contiguous

    def contiguous_(self: torch.Tensor, memory_format: torch.memory_format = torch.contiguous_format) -> torch.Tensor:
        # THPVariable_contiguous: a device guard when a copy is needed (the split op body's
        # k-cache store, sglang 0.5.17+ quant_k_cache.py, on GLM-5's strided k_rope).
        if _is_fake_cuda(self):
            return torch.ops.aten.contiguous.default(self, memory_format=memory_format)
        return contiguous(self, memory_format=memory_format)

    def invert_(self: torch.Tensor) -> torch.Tensor:
        # THPVariable_invert: a device guard, then bitwise_not.
        if _is_fake_cuda(self):
            return torch.ops.aten.bitwise_not.default(self)
        return invert(self)

    def copy_(self: torch.Tensor, src: Any, non_blocking: bool = False) -> torch.Tensor:
        # Tensor.copy_'s Python binding takes a CUDA device guard first.
        if _is_fake_cuda(self) or _is_fake_cuda(src):
            return torch.ops.aten.copy_.default(self, src, non_blocking)
        return copy(self, src, non_blocking)

    def getitem_(self: torch.Tensor, idx: Any) -> Any:
        if not _is_fake_cuda(self):
            return getitem(self, idx)
        x, advanced = _index_ops(self, idx)
        return x if advanced is None else torch.ops.aten.index.Tensor(x, advanced)

    def setitem_(self: torch.Tensor, idx: Any, value: Any) -> None:
        if not _is_fake_cuda(self):
            return setitem(self, idx, value)
        x, advanced = _index_ops(self, idx)
        if not isinstance(value, torch.Tensor):
            value = torch.full((), value, dtype=self.dtype, device=self.device)
        if advanced is None:
            torch.ops.aten.copy_.default(x, value)
        else:
            torch.ops.aten.index_put_.default(x, advanced, value)
        return None

    torch.Tensor.__getitem__ = getitem_  # type: ignore[method-assign]
    torch.Tensor.__setitem__ = setitem_  # type: ignore[method-assign]
    torch.Tensor.copy_ = copy_  # type: ignore[method-assign]
    torch.Tensor.__invert__ = invert_  # type: ignore[method-assign]
    torch.Tensor.contiguous = contiguous_  # type: ignore[method-assign]


def install_cuda_runtime(total_memory: int) -> None:
    """Streams, events, CUDA graphs, synchronization and memory queries."""
    torch.tensor = _fake_cuda_tensor_factory()  # type: ignore[assignment]
    cuda = torch.cuda
    cuda.Stream = Stream  # type: ignore[misc,assignment]
    cuda.Event = Stream  # type: ignore[misc,assignment]
    cuda.ExternalStream = Stream  # type: ignore[misc,assignment]
    cuda.CUDAGraph = CUDAGraph  # type: ignore[misc,assignment]
    cuda.graph = graph  # type: ignore[misc,assignment]
    cuda.stream = _stream_context  # type: ignore[assignment]
    cuda.current_stream = lambda device=None: Stream()  # type: ignore[assignment]
    cuda.default_stream = lambda device=None: Stream()  # type: ignore[assignment]
    cuda.set_stream = lambda stream: None  # type: ignore[assignment]
    cuda.synchronize = lambda device=None: None  # type: ignore[assignment]
    cuda.empty_cache = lambda: None  # type: ignore[assignment]
    cuda.graph_pool_handle = lambda: (0, 0)  # type: ignore[assignment]
    cuda.is_current_stream_capturing = capturing.is_capturing  # type: ignore[assignment]
    cuda.mem_get_info = lambda device=None: (total_memory * 9 // 10, total_memory)  # type: ignore[assignment]
    cuda.memory_allocated = lambda device=None: 0  # type: ignore[assignment]
    cuda.max_memory_allocated = lambda device=None: 0  # type: ignore[assignment]
    cuda.memory_reserved = lambda device=None: 0  # type: ignore[assignment]
    cuda.reset_peak_memory_stats = lambda device=None: None  # type: ignore[assignment]
    # torch >= 2.10: Dynamo starts every trace from torch.accelerator's current stream.
    if hasattr(torch, "accelerator"):
        torch.accelerator.current_stream = lambda device=None: Stream()  # type: ignore[assignment]
        torch.accelerator.current_device_index = torch.cuda.current_device  # type: ignore[assignment]
    # Dynamo saves and restores the device RNG state around every compile.
    cuda.get_rng_state = lambda device="cuda": torch.zeros(16, dtype=torch.uint8)  # type: ignore[assignment]
    cuda.set_rng_state = lambda state, device="cuda": None  # type: ignore[assignment]
    cuda.memory.mem_get_info = cuda.mem_get_info  # type: ignore[attr-defined]
    cuda.memory.empty_cache = cuda.empty_cache  # type: ignore[attr-defined]


NVIDIA_SMI = """#!/bin/sh
# nvidia-smi of one simulated {name} (the queries sglang makes).
case "$*" in
  *memory.total*) echo {memory} ;;
  *compute_cap*) echo {major}.{minor} ;;
  *--list-gpus*) echo "GPU 0: {name} (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
  *) echo "nvidia-smi stand-in: unsupported query: $*" >&2; exit 2 ;;
esac
"""


def install_nvidia_smi(bin_dir: str, gpu: Any) -> None:
    """An ``nvidia-smi`` on PATH answering as the simulated GPU."""
    import os
    import pathlib

    path = pathlib.Path(bin_dir) / "nvidia-smi"
    major, minor = gpu.capability
    # A GPU without memory of its own (GB10: unified memory) reports none.
    memory = "[N/A]" if gpu.integrated else str(gpu.total_memory >> 20)
    path.write_text(NVIDIA_SMI.format(name=gpu.name, memory=memory, major=major, minor=minor))
    path.chmod(0o755)
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def install_host_collectives() -> None:
    """The gloo world runs its host collectives for real, outside FakeTensorMode: barriers
    (torch 2.9 builds the barrier's tensor in the active mode, then refuses it) and the
    object collectives sglang's communicators exchange handles with (the pickled bytes
    are host tensors, which the mode would make fakes without data)."""
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    def outside_fake_mode(fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with unset_fake_temporarily():
                return fn(*args, **kwargs)

        call.__wrapped__ = fn  # type: ignore[attr-defined]
        return call

    for name in ("barrier", "broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list"):
        setattr(dist, name, outside_fake_mode(getattr(dist, name)))


def report(tag: str, data: Any) -> None:
    print(f"{tag} " + json.dumps(data), flush=True)
