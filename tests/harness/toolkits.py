"""A fake CUDA toolkit: a CUDA_HOME whose ``bin/nvcc`` says it is a chosen release.

Stands in for an installed nvcc where a test needs several releases side by side (the
CUDA-version tests of the patched and the unseriesed flashinfer releases). The script writes
a line to ``$FP4GRAPH_NVCC_LOG`` on each call when that is set, so a test can count calls.
"""

from __future__ import annotations

import pathlib

NVCC = """#!/bin/sh
[ -n "$FP4GRAPH_NVCC_LOG" ] && echo call >> "$FP4GRAPH_NVCC_LOG"
echo "nvcc: NVIDIA (R) Cuda compiler driver"
echo "Cuda compilation tools, release {version}, V{version}.41"
"""


def fake_cuda_home(root: pathlib.Path, version: str) -> pathlib.Path:
    """``root/cuda-<version>`` with a ``bin/nvcc`` that reports ``version``; ``"none"``:
    the directory without nvcc (a machine with no toolkit)."""
    home = root / f"cuda-{version}"
    (home / "bin").mkdir(parents=True)
    if version != "none":
        nvcc = home / "bin" / "nvcc"
        nvcc.write_text(NVCC.format(version=version), encoding="utf-8")
        nvcc.chmod(0o755)
    return home
