"""The collective kernels a CPU lacks, for tensor-parallel runs of the simulation (child side).

A tensor-parallel case runs one process per rank (:func:`modelsim.run_ranks`), joined by a
real gloo world on the host: sglang's own ``init_distributed_environment`` /
``initialize_model_parallel`` build its ``GroupCoordinator`` s over it, and every decision
they take (which all-reduce, custom or NCCL, in or out of place, captured or eager) is
sglang's.  What cannot exist on a CPU is stood in for at the level of the compiled library
sglang's Python calls:

* NVML (``pynvml``): the topology of a PCIe box, no NVLink between any two GPUs
  (``nvmlDeviceGetP2PStatus(..., NVML_P2P_CAPS_INDEX_NVLINK)`` answers NOT_SUPPORTED), so
  sglang's ``CustomAllreduce`` turns itself on for 2 GPUs and off for more, as on the
  seed's 8 x RTX PRO 6000 machine;
* libcudart (``CudaRTLibrary``'s functions): device allocations and IPC handles are
  numbers (the custom all-reduce's shared buffers), nothing is allocated;
* libnccl (``NCCLLibrary``'s functions, under sglang's ``PyNcclCommunicator``);
* sgl_kernel's custom all-reduce ops (``init_custom_ar``, ``all_reduce``, the buffer
  registration ops; the ones whose schema sgl-kernel infers from C++ are defined here
  from ``sgl-kernel/csrc/common_extension.cc``).

Every collective these kernels would run is recorded (:data:`LOG`) and runs for real
through gloo on the host: device tensors are fakes without data, so each rank contributes
a placeholder of the collective's element count (rank r sends the value r + 1) and the
result is checked (an all-reduce sums to 1 + ... + world; an all-gather holds each rank's
value in its slot).  Before it, the ranks compare what they are about to run (kind, path,
count, dtype): a rank whose schedule differs from rank 0's fails naming both, where NCCL
would hang.  A CUDA graph replays the collectives captured in it (``stand_ins.CUDAGraph``).
"""

from __future__ import annotations

import ctypes
import dataclasses
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from harness.models import capturing

# --- the log and the real collective ----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective a kernel ran: ``via`` the library (``nccl``, ``custom_ar``), its kind,
    element count (per rank: the send count), dtype, and when (``phase``)."""

    via: str
    kind: str
    count: int
    dtype: str
    phase: str = "eager"  # "eager" | "captured" (inside a CUDA graph capture) | "replayed"

    def key(self) -> tuple[str, str, int, str]:
        return (self.via, self.kind, self.count, self.dtype)


LOG: list[Collective] = []
_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
_VIAS = ("nccl", "custom_ar", "torch.distributed")
# Names of the dtypes a collective can carry, by code (the schedule check sends codes).
_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int8, torch.uint8,
           torch.int32, torch.int64, torch.float8_e4m3fn]


class ScheduleMismatch(RuntimeError):
    """The ranks were about to run different collectives (NCCL would hang there)."""


def _phase() -> str:
    return "captured" if capturing.is_capturing() else "eager"


def run(via: str, kind: str, count: int, dtype: torch.dtype, *, root: int = 0, phase: str | None = None) -> None:
    """Record the collective and run it through gloo on placeholders of ``count`` elements."""
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    entry = Collective(via, kind, int(count), str(dtype).removeprefix("torch."), phase or _phase())
    LOG.append(entry)
    if dist.get_backend() == "fake":  # one rank of many: the others are torch's fake group
        return
    with unset_fake_temporarily():
        world, rank = dist.get_world_size(), dist.get_rank()
        mine = torch.tensor([_VIAS.index(via), _KINDS.index(kind), int(count), _DTYPES.index(dtype), len(LOG)],
                            dtype=torch.int64)
        every = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(every, mine)
        if any(not torch.equal(e, every[0]) for e in every):
            raise ScheduleMismatch(
                f"rank {rank} runs collective #{len(LOG)} {entry}; the ranks run "
                + "; ".join(f"rank {r}: {_describe(e)}" for r, e in enumerate(every))
            )
        value = float(rank + 1)
        if kind in ("all_reduce", "reduce"):
            t = torch.full((count,), value)
            dist.all_reduce(t)
            expected = world * (world + 1) / 2
            _check(bool((t == expected).all()), entry, f"sum {expected}")
        elif kind == "all_gather":
            out = torch.empty(count * world)
            dist.all_gather_into_tensor(out, torch.full((count,), value))
            want = torch.arange(1, world + 1, dtype=torch.float32).repeat_interleave(count)
            _check(torch.equal(out, want), entry, "each rank's value in its slot")
        elif kind == "reduce_scatter":
            out = torch.empty(count)
            dist.reduce_scatter_tensor(out, torch.full((count * world,), value))
            _check(bool((out == world * (world + 1) / 2).all()), entry, "the sum")
        elif kind == "broadcast":
            t = torch.full((count,), value)
            dist.broadcast(t, src=root)
            _check(bool((t == root + 1).all()), entry, f"rank {root}'s value")


def _describe(codes: torch.Tensor) -> str:
    via, kind, count, dtype, number = (int(c) for c in codes)
    return f"#{number} {_VIAS[via]} {_KINDS[kind]} of {count} {_DTYPES[dtype]}"


def _check(ok: bool, entry: Collective, what: str) -> None:
    if not ok:
        raise RuntimeError(f"gloo {entry.kind} of {entry} did not give {what}")


def replay(entries: list[Collective]) -> None:
    """What a CUDA graph replay runs of its captured collectives."""
    for e in entries:
        run(e.via, e.kind, e.count, _DTYPES[[str(d).removeprefix("torch.") for d in _DTYPES].index(e.dtype)],
            phase="replayed")


# --- NVML: the topology of a PCIe box ----------------------------------------------------


class NVMLError(Exception):
    pass


def nvml_module() -> types.ModuleType:
    """``pynvml`` of a machine whose GPUs talk over PCIe only (the functions sglang calls)."""
    nvml = types.ModuleType("pynvml")
    nvml.__file__ = "<stand-in for NVML: GPUs on PCIe, no NVLink>"
    nvml.NVMLError = NVMLError
    nvml.NVML_P2P_CAPS_INDEX_NVLINK = 2  # nvml.h: NVML_P2P_CAPS_INDEX_NVLINK
    nvml.NVML_P2P_STATUS_OK = 0
    nvml.NVML_P2P_STATUS_NOT_SUPPORTED = 5
    nvml.nvmlInit = lambda: None
    nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetCount = lambda: torch.cuda.device_count()
    nvml.nvmlDeviceGetHandleByIndex = lambda index: ("gpu", int(index))

    def p2p_status(a: Any, b: Any, index: int) -> int:
        return nvml.NVML_P2P_STATUS_NOT_SUPPORTED if index == nvml.NVML_P2P_CAPS_INDEX_NVLINK else 0

    nvml.nvmlDeviceGetP2PStatus = p2p_status
    return nvml


def install_nvml() -> None:
    """Before sglang imports ``custom_all_reduce_utils`` (it imports pynvml at import)."""
    sys.modules["pynvml"] = nvml_module()


# --- libcudart and libnccl: the functions sglang's ctypes wrappers call -----------------

_ADDRESSES = [0x7F0000000000]


def _cudart_functions() -> dict[str, Callable[..., int]]:
    def malloc(ptr: Any, size: int) -> int:
        ptr._obj.value = _ADDRESSES[0]
        _ADDRESSES[0] += (int(size) + 0xFFFF) & ~0xFFFF
        return 0

    def ipc_get(handle: Any, ptr: Any) -> int:
        # The handle names the allocation: (rank, address).
        import torch.distributed as dist

        raw = int(dist.get_rank()).to_bytes(8, "little") + int(ptr.value or ptr).to_bytes(8, "little")
        ctypes.memmove(ctypes.addressof(handle._obj), raw, len(raw))
        return 0

    def ipc_open(ptr: Any, handle: Any, flags: int) -> int:
        raw = bytes(handle)[:16]
        ptr._obj.value = int.from_bytes(raw[8:], "little")
        return 0

    return {
        "cudaSetDevice": lambda device: 0,
        "cudaDeviceSynchronize": lambda: 0,
        "cudaDeviceReset": lambda: 0,
        "cudaGetErrorString": lambda error: b"cudart stand-in error",
        "cudaMalloc": malloc,
        "cudaFree": lambda ptr: 0,
        "cudaMemset": lambda ptr, value, count: 0,
        "cudaMemcpy": lambda dst, src, count, kind: 0,
        "cudaIpcGetMemHandle": ipc_get,
        "cudaIpcOpenMemHandle": ipc_open,
    }


def _nccl_dtypes() -> dict[int, torch.dtype]:
    from sglang.srt.distributed.device_communicators.pynccl_wrapper import ncclDataTypeEnum

    out = {}
    for dtype in (torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.float32,
                  torch.float64, torch.bfloat16):
        out[int(ncclDataTypeEnum.from_torch(dtype))] = dtype
    return out


_COMMS: dict[int, tuple[int, int]] = {}  # comm handle -> (nranks, rank)


def _nccl_functions() -> dict[str, Callable[..., int]]:
    import torch.distributed as dist

    dtypes = _nccl_dtypes()

    def comm_of(comm: Any) -> tuple[int, int]:
        nranks, rank = _COMMS[int(comm.value if hasattr(comm, "value") else comm)]
        if nranks != dist.get_world_size():
            raise NotImplementedError(
                f"the NCCL stand-in runs a communicator of {nranks} ranks through gloo's world of "
                f"{dist.get_world_size()}: a communicator that is not the whole world is not simulated"
            )
        return nranks, rank

    def version(ptr: Any) -> int:
        ptr._obj.value = 22703  # NCCL 2.27.3 (torch 2.9 / 2.11 CUDA wheels)
        return 0

    def unique_id(ptr: Any) -> int:
        raw = b"fp4graph-nccl-stand-in".ljust(128, b"\0")
        ctypes.memmove(ctypes.addressof(ptr._obj), raw, 128)
        return 0

    def init_rank(comm_ptr: Any, nranks: int, uid: Any, rank: int) -> int:
        handle = 0x1000 + len(_COMMS)
        _COMMS[handle] = (int(nranks), int(rank))
        comm_ptr._obj.value = handle
        return 0

    def all_reduce(send: Any, recv: Any, count: int, dtype: int, op: int, comm: Any, stream: Any) -> int:
        comm_of(comm)
        run("nccl", "all_reduce", count, dtypes[int(dtype)])
        return 0

    def reduce(send: Any, recv: Any, count: int, dtype: int, op: int, root: int, comm: Any, stream: Any) -> int:
        comm_of(comm)
        run("nccl", "reduce", count, dtypes[int(dtype)], root=int(root))
        return 0

    def all_gather(send: Any, recv: Any, count: int, dtype: int, comm: Any, stream: Any) -> int:
        comm_of(comm)
        run("nccl", "all_gather", count, dtypes[int(dtype)])
        return 0

    def reduce_scatter(send: Any, recv: Any, count: int, dtype: int, op: int, comm: Any, stream: Any) -> int:
        comm_of(comm)
        run("nccl", "reduce_scatter", count, dtypes[int(dtype)])
        return 0

    def broadcast(send: Any, recv: Any, count: int, dtype: int, root: int, comm: Any, stream: Any) -> int:
        comm_of(comm)
        run("nccl", "broadcast", count, dtypes[int(dtype)], root=int(root))
        return 0

    def point_to_point(*args: Any) -> int:
        raise NotImplementedError("ncclSend / ncclRecv (pipeline parallel, DP attention) are not simulated")

    return {
        "ncclGetErrorString": lambda result: b"nccl stand-in error",
        "ncclGetVersion": version,
        "ncclGetUniqueId": unique_id,
        "ncclCommInitRank": init_rank,
        "ncclAllReduce": all_reduce,
        "ncclReduce": reduce,
        "ncclAllGather": all_gather,
        "ncclReduceScatter": reduce_scatter,
        "ncclBroadcast": broadcast,
        "ncclSend": point_to_point,
        "ncclRecv": point_to_point,
        "ncclCommDestroy": lambda comm: 0,
        "ncclGroupStart": lambda: 0,
        "ncclGroupEnd": lambda: 0,
    }


def install_libraries() -> None:
    """sglang's ctypes wrappers of libcudart (``CudaRTLibrary``) and libnccl
    (``NCCLLibrary``) call these functions instead of the shared libraries' (which a
    CPU-only machine has not, or cannot run); every method of the wrappers is sglang's."""
    from sglang.srt.distributed.device_communicators import cuda_wrapper, pynccl_wrapper

    cudart = _cudart_functions()

    def cudart_init(self: Any, so_file: str | None = None) -> None:
        self.lib = None
        self.funcs = cudart

    cuda_wrapper.CudaRTLibrary.__init__ = cudart_init  # type: ignore[method-assign]
    nccl: dict[str, Callable[..., int]] = {}

    def nccl_init(self: Any, so_file: str | None = None) -> None:
        if not nccl:
            nccl.update(_nccl_functions())
        self.lib = None
        self._funcs = nccl

    pynccl_wrapper.NCCLLibrary.__init__ = nccl_init  # type: ignore[method-assign]


# --- torch.distributed on the device group (ProcessGroupNCCL on GPUs) --------------------

_PROCESS_GROUP_OPS = {
    "all_reduce": ("all_reduce", lambda args, kw: args[0].numel()),
    "all_gather_into_tensor": ("all_gather", lambda args, kw: args[1].numel()),
    "reduce_scatter_tensor": ("reduce_scatter", lambda args, kw: args[0].numel()),
    "broadcast": ("broadcast", lambda args, kw: args[0].numel()),
}


def _is_fake_cuda(t: Any) -> bool:
    return (isinstance(t, torch._subclasses.fake_tensor.FakeTensor) and t.device.type == "cuda")


def install_process_group_collectives() -> None:
    """sglang's group coordinators fall back to ``torch.distributed`` on their device group
    (NCCL on GPUs; gloo here, which on fake CUDA tensors runs c10d's Meta kernels: nothing
    crosses ranks).  Called with fake CUDA tensors, these run the collective through
    :func:`run` (``via="torch.distributed"``); on host tensors they are torch's."""
    import torch.distributed as dist

    for name, (kind, count_of) in _PROCESS_GROUP_OPS.items():
        real = getattr(dist, name)

        def call(*args: Any, _real: Any = real, _kind: str = kind, _count: Any = count_of, **kwargs: Any) -> Any:
            tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            if not tensors or not all(_is_fake_cuda(t) for t in tensors):
                return _real(*args, **kwargs)
            if torch._guards.TracingContext.try_get() is None:
                t = tensors[0] if _kind != "all_gather" else tensors[-1]
                run("torch.distributed", _kind, _count(args, kwargs), t.dtype,
                    root=int(kwargs.get("src", args[1] if _kind == "broadcast" and len(args) > 1 else 0)))
            return None

        call.__wrapped__ = real  # type: ignore[attr-defined]
        setattr(dist, name, call)


# --- sgl_kernel's custom all-reduce ----------------------------------------------------

# sgl-kernel csrc/common_extension.cc defines these from their C++ signatures
# (``m.def("dispose", &dispose)``), so the library holds no schema text for them.
INFERRED_SCHEMAS = (
    "dispose(int fa) -> ()",
    "meta_size() -> int",
    "register_buffer(int fa, int[] fake_ipc_ptrs) -> ()",
    "get_graph_buffer_ipc_meta(int fa) -> (int[], int[])",
    "register_graph_buffers(int fa, int[][] handles, int[][] offsets) -> ()",
)
_META_SIZE = 4096  # sizeof(vllm::Signal) rounded, what meta_size() reports on a GPU
_CUSTOM_AR: dict[int, int] = {}  # handle -> rank


def _init_custom_ar(ipc_tensors: list[int], rank_data: torch.Tensor, rank: int, full_nvlink: bool) -> int:
    handle = 0x2000 + len(_CUSTOM_AR)
    _CUSTOM_AR[handle] = int(rank)
    return handle


def _custom_ar_all_reduce(fa: int, inp: torch.Tensor, out: torch.Tensor, reg_buffer: int, reg_size: int) -> None:
    if torch._guards.TracingContext.try_get() is None:
        run("custom_ar", "all_reduce", inp.numel(), inp.dtype)


# Meta kernels of the record's custom all-reduce ops (stand_ins.RETURNS picks these up).
RETURNS = {"init_custom_ar": _init_custom_ar}
WRITES = {"all_reduce": _custom_ar_all_reduce}
NO_TENSOR_OPS: dict[str, Callable[..., Any]] = {
    "dispose": lambda fa: None,
    "meta_size": lambda: _META_SIZE,
    "register_buffer": lambda fa, ptrs: None,
    "get_graph_buffer_ipc_meta": lambda fa: ([], []),
    "register_graph_buffers": lambda fa, handles, offsets: None,
}


def report() -> dict[str, Any]:
    """What the ranks' group coordinators chose, and the collectives run so far."""
    from sglang.srt.distributed.parallel_state import get_tp_group

    tp = get_tp_group()
    ca = getattr(tp, "ca_comm", None)
    nccl = getattr(tp, "pynccl_comm", None)
    return {
        "tp_size": tp.world_size,
        "custom_all_reduce": ca is not None and not ca.disabled,
        "custom_all_reduce_class": type(ca).__name__ if ca is not None else None,
        "pynccl": nccl is not None and bool(getattr(nccl, "available", False)),
    }
