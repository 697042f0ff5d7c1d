"""Import sglang's NVFP4 loader on a CPU-only machine, with the device reported as SM120.

Child interpreters start with :data:`PRELUDE` and have :data:`SGSIM_DIR` on their path: the
shared shims of ``tests/harness/sgsim.py`` (``prepare()``: the SM120 simulation, inert
torchvision / sgl_kernel stand-ins that PyPI cannot provide for CPU torch, sgl_kernel fakes
skipped), so both test areas import sglang the same way.
"""

from __future__ import annotations

import pathlib

SGSIM_DIR = pathlib.Path(__file__).resolve().parents[1] / "harness"

PRELUDE = "import sgsim\nsgsim.prepare()\n"
