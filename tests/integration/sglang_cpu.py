"""Import sglang's NVFP4 loader on a CPU-only machine, with the device reported as SM120.

Child interpreters start with :data:`PRELUDE`.  ``cpu_stubs/`` goes first on their path:
torchvision and sgl_kernel from PyPI need a CUDA build of torch, and sglang imports both
on its CUDA path (image processors; quantization kernels) although the loader uses neither.
"""

from __future__ import annotations

import pathlib

STUBS = pathlib.Path(__file__).resolve().parent / "cpu_stubs"

PRELUDE = '''
from fp4graph import simulate
simulate.install()
import torch
_register_fake = torch.library.register_fake
def _register_fake_unless_sgl_kernel(op, *args, **kwargs):
    # sglang registers fakes for sgl_kernel ops, which the stub does not define.
    if isinstance(op, str) and op.startswith("sgl_kernel::"):
        return (lambda fn: fn) if not args else None
    return _register_fake(op, *args, **kwargs)
torch.library.register_fake = _register_fake_unless_sgl_kernel
'''
