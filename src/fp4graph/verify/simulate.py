"""Make a CPU-only PyTorch look like a CUDA build running on a chosen GPU.

Dynamo tracing is Python-level, so the SM120 failure (and our fix) can be
traced on a machine without a GPU: tensors come from ``FakeTensorMode`` with
``device="cuda"``, and the device queries FlashInfer and SGLang make are
answered here as a CUDA 12.8 build on an RTX PRO 6000 Blackwell would answer
them.  Call :func:`install` before importing flashinfer or sglang: both pick
their SM120 code paths at import time.

Every replacement is a plain function returning plain data (a namedtuple for
device properties), because Dynamo cannot trace ``unittest.mock`` objects and
rejects instances of ad-hoc classes built in a sourceless way.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
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
            is_integrated=False,
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
GPUS = {"sm120": SM120, "sm100": SM100}

# torch.cuda.is_available() answers True while libraries import and pick their
# CUDA paths, and False while Dynamo compiles: Dynamo itself saves the CUDA RNG
# state when CUDA is available, which a CPU build cannot do.
_available = [True]


@contextlib.contextmanager
def compiling() -> Iterator[None]:
    """Report CUDA as unavailable for the duration (wrap torch.compile calls)."""
    _available.append(False)
    try:
        yield
    finally:
        _available.pop()


def install(gpu: SimulatedGpu = SM120, *, device_count: int = 1) -> None:
    """Answer torch's CUDA device queries as ``gpu`` would, process-wide."""
    props = gpu.properties()

    def get_device_capability(device: Any = None) -> tuple[int, int]:
        return gpu.capability

    def get_device_properties(device: Any = None) -> DeviceProperties:
        return props

    def get_device_name(device: Any = None) -> str:
        return gpu.name

    def is_available() -> bool:
        return _available[-1]

    def get_device_count() -> int:
        return device_count

    def current_device() -> int:
        return 0

    # `with torch.cuda.device(i)`: the previous device (-1 for a no-op).  Two
    # distinct functions: Dynamo registers a handler per function object.
    def exchange_device(device: int) -> int:
        return -1 if device < 0 else 0

    def maybe_exchange_device(device: int) -> int:
        return -1 if device < 0 else 0

    def is_current_stream_capturing() -> bool:
        return False

    torch.version.cuda = gpu.cuda_version
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
    torch.cuda._exchange_device = exchange_device
    torch.cuda._maybe_exchange_device = maybe_exchange_device
    torch.cuda.is_current_stream_capturing = is_current_stream_capturing
