"""Make a CPU-only PyTorch look like a CUDA build running on a chosen GPU.

Dynamo tracing is Python-level, so the SM120 failure (and our fix) can be
traced on a machine without a GPU: tensors come from ``FakeTensorMode`` with
``device="cuda"``, and the device queries FlashInfer and SGLang make are
answered here as a CUDA 12.8 build on an RTX PRO 6000 Blackwell would answer
them (or on the other GPUs of :data:`GPUS`: a DGX Spark's GB10, SM121, with the
CUDA 13.0 build a DGX Spark installs, and a B200, SM100).  ``torch.version.cuda`` is
the GPU's unless :func:`install` is told otherwise: :func:`torch_cuda` says which CUDA
the torch a stack pins is built for on that GPU's machine (SM120 answers 13.0 for torch
2.11.0+).  Call :func:`install` before importing flashinfer or sglang: both pick their
SM12x code paths at import time.

Every replacement is a plain function returning plain data (a namedtuple for
device properties), because Dynamo cannot trace ``unittest.mock`` objects and
rejects instances of ad-hoc classes built in a sourceless way.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
from collections.abc import Iterator
from typing import Any

import torch

DeviceProperties = collections.namedtuple(
    "DeviceProperties",
    [
        "name",
        "major",
        "minor",
        "total_memory",
        "multi_processor_count",
        "L2_cache_size",
        "warp_size",
        "max_threads_per_multi_processor",
        "regs_per_multiprocessor",
        "shared_memory_per_block_optin",
        "is_integrated",
        "is_multi_gpu_board",
        "gcnArchName",
        "uuid",
    ],
)


@dataclasses.dataclass(frozen=True)
class SimulatedGpu:
    """What a simulated device reports."""

    name: str
    capability: tuple[int, int]
    multi_processor_count: int
    total_memory: int
    l2_cache_size: int
    cuda_version: str = "12.8"
    # Device memory is the system's (GB10: CPU and GPU share one LPDDR5x pool); sglang
    # then sizes its pools from the host's available memory (get_available_gpu_memory).
    integrated: bool = False

    @property
    def arch(self) -> str:
        """``sm120``, ``sm121``, ``sm100``: the key of :data:`GPUS`."""
        major, minor = self.capability
        return f"sm{major}{minor}"

    def properties(self) -> DeviceProperties:
        major, minor = self.capability
        return DeviceProperties(
            name=self.name,
            major=major,
            minor=minor,
            total_memory=self.total_memory,
            multi_processor_count=self.multi_processor_count,
            L2_cache_size=self.l2_cache_size,
            warp_size=32,
            max_threads_per_multi_processor=1536,
            regs_per_multiprocessor=65536,
            shared_memory_per_block_optin=101376 if major == 12 else 232448,
            is_integrated=self.integrated,
            is_multi_gpu_board=False,
            gcnArchName="",
            uuid="00000000-0000-0000-0000-000000000000",
        )


GiB = 1 << 30
SM120 = SimulatedGpu(
    name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
    capability=(12, 0),
    multi_processor_count=188,
    total_memory=96 * GiB,
    l2_cache_size=128 << 20,
)
SM100 = SimulatedGpu(
    name="NVIDIA B200",
    capability=(10, 0),
    multi_processor_count=148,
    total_memory=180 * GiB,
    l2_cache_size=126 << 20,
)
# DGX Spark: GB10 (Grace Blackwell), compute capability 12.1, 48 SMs, 128 GB of LPDDR5x
# unified memory that device allocations share with the CPU (is_integrated); one GPU.
# Its torch is a CUDA 13.0 build (SM121a needs CUDA 12.9+): patches/locks/platforms.toml
# installs torch 2.9.1+cu130 there (sglang 0.5.8 ... 0.5.10.post1), and PyPI's torch
# 2.11.0+ is a CUDA 13.0 build (the locks of 0.5.11+ pin nvidia-cuda-runtime 13.0).
SM121 = SimulatedGpu(
    name="NVIDIA GB10",
    capability=(12, 1),
    multi_processor_count=48,
    total_memory=128 * GiB,
    l2_cache_size=24 << 20,
    cuda_version="13.0",
    integrated=True,
)
GPUS = {gpu.arch: gpu for gpu in (SM120, SM121, SM100)}
# PyPI's torch for linux x86_64 (SM120, SM100 machines) is a CUDA 13.0 build from this
# release on (the locks of sglang 0.5.11+ pin nvidia-cuda-runtime 13.0), a CUDA 12.8 build
# before it (2.8.0, 2.9.1: nvidia-cuda-runtime-cu12 12.8.90).
FIRST_CUDA13_TORCH = (2, 11)
# The SM12x family (consumer / workstation Blackwell, no tcgen05): the GPUs every path the
# series take on SM120 must also take.
SM12X = tuple(gpu for gpu in GPUS.values() if gpu.capability[0] == 12)

# torch.cuda.is_available() answers True while libraries import and pick their
# CUDA paths, and False while Dynamo compiles: Dynamo itself saves the CUDA RNG
# state when CUDA is available, which a CPU build cannot do.
_available = [True]
# The current device (torch.cuda.set_device): a process of a tensor-parallel run has its
# rank's GPU current, and ``device="cuda"`` tensors land there.
_current = [0]
_device_count = [1]


def set_device(device: Any) -> None:
    """``torch.cuda.set_device``: an index, ``"cuda:N"`` or a ``torch.device``."""
    index = device if isinstance(device, int) else torch.device(device).index
    if index is None:  # "cuda": the current device
        return
    if not 0 <= index < _device_count[0]:
        raise RuntimeError(f"simulated CUDA has {_device_count[0]} device(s); cannot set device {device!r}")
    _current[0] = index


def set_device_count(count: int) -> None:
    """How many GPUs of the simulated kind the machine has (device 0 current)."""
    if count < 1:
        raise ValueError(f"a simulated machine has at least one GPU, not {count}")
    _device_count[0] = count
    _current[0] = 0


@contextlib.contextmanager
def compiling() -> Iterator[None]:
    """Report CUDA as unavailable for the duration (wrap torch.compile calls)."""
    _available.append(False)
    try:
        yield
    finally:
        _available.pop()


def torch_cuda(gpu: SimulatedGpu, torch_version: str) -> str:
    """``torch.version.cuda`` of the torch ``torch_version`` (``2.11.0``, ``2.9.1+cu130``)
    that a user of ``gpu`` installs: a CUDA build's local label where it has one (``cuNNN``);
    on SM121 the GPU's (every aarch64 stack installs a CUDA 13.0 torch); else PyPI's build
    for linux x86_64 (:data:`FIRST_CUDA13_TORCH`)."""
    release, _, label = torch_version.partition("+")
    parts = release.split(".")
    if len(parts) < 2 or not all(part.isdigit() for part in parts):
        raise ValueError(f"torch {torch_version!r} is not a torch release (X.Y.Z[+label])")
    if label.startswith("cu") and label[2:].isdigit() and len(label) > 3:
        return f"{label[2:-1]}.{label[-1]}"
    if gpu.capability == (12, 1):
        return gpu.cuda_version
    return "13.0" if (int(parts[0]), int(parts[1])) >= FIRST_CUDA13_TORCH else "12.8"


def install(
    gpu: SimulatedGpu = SM120, *, device_count: int = 1, cuda_version: str | None = None
) -> None:
    """Answer torch's CUDA device queries as ``gpu`` would, process-wide; ``torch.version.cuda``
    is ``cuda_version`` where given (:func:`torch_cuda`), else the GPU's."""
    props = gpu.properties()

    def get_device_capability(device: Any = None) -> tuple[int, int]:
        return gpu.capability

    def get_device_properties(device: Any = None) -> DeviceProperties:
        return props

    def get_device_name(device: Any = None) -> str:
        return gpu.name

    def is_available() -> bool:
        return _available[-1]

    _device_count[0] = device_count
    _current[0] = 0

    def get_device_count() -> int:
        return _device_count[0]

    def current_device() -> int:
        return _current[0]

    # `with torch.cuda.device(i)`: switch to i, return the previous device (-1 for a
    # no-op).  Two distinct functions: Dynamo registers a handler per function object.
    def exchange_device(device: int) -> int:
        if device < 0:
            return -1
        previous, _current[0] = _current[0], device
        return previous

    def maybe_exchange_device(device: int) -> int:
        if device < 0:
            return -1
        previous, _current[0] = _current[0], device
        return previous

    def is_current_stream_capturing() -> bool:
        return False

    torch.version.cuda = cuda_version or gpu.cuda_version
    # A fake CUDA tensor initialises the real CUDA context when torch believes
    # one exists (CUDA builds of torch, e.g. the stacks' own pins): skip that.
    from torch._subclasses import fake_tensor

    fake_tensor.init_gpu_context = lambda device: None  # type: ignore[assignment]
    torch.cuda.get_device_capability = get_device_capability
    torch.cuda.get_device_properties = get_device_properties  # type: ignore[assignment]
    torch.cuda.get_device_name = get_device_name
    torch.cuda.is_available = is_available
    torch.cuda.device_count = get_device_count
    torch.cuda.current_device = current_device
    torch.cuda.set_device = set_device
    # A process that made a CUDA tensor has initialized CUDA: fake CUDA tensors without an
    # index then land on the current device (FakeTensor._normalize_fake_device).
    torch.cuda.is_initialized = lambda: True
    # The current accelerator's module is CUDA's (a CPU build would answer torch.cpu).  An
    # lru_cache like torch's own: Dynamo handles the function by its __wrapped__.
    get_device_module = getattr(torch.get_device_module, "_simulated_from", torch.get_device_module)

    def device_module(device: Any = None) -> Any:
        return get_device_module("cuda" if device is None else device)

    cached = functools.lru_cache(maxsize=None)(device_module)
    cached._simulated_from = get_device_module  # type: ignore[attr-defined]
    torch.get_device_module = cached
    torch.cuda._exchange_device = exchange_device
    torch.cuda._maybe_exchange_device = maybe_exchange_device
    torch.cuda.is_current_stream_capturing = is_current_stream_capturing
