"""sglang's own piecewise CUDA graph test, run from a checkout at the pinned release tag."""

from __future__ import annotations

import pathlib
import subprocess

from ..model.errors import Fp4graphError

# Upstream's piecewise tests (unittest style; FP4 case needs SM100+, ran on B200 upstream).
TEST_FILE = "test/registered/piecewise_cuda_graph/test_piecewise_cuda_graph_small_1_gpu.py"


class UpstreamTestError(Fp4graphError):
    """The sglang checkout is missing, at another tag, or lacks the test file."""


def release_tag(sglang_version: str) -> str:
    return f"v{sglang_version}"


def checkout_tag(checkout: pathlib.Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(checkout), "describe", "--tags", "--exact-match", "HEAD"],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip() or None


def test_command(python: pathlib.Path | str, checkout: pathlib.Path, sglang_version: str) -> list[str]:
    """``python <checkout>/test/.../test_piecewise_cuda_graph_small_1_gpu.py``; checks the tag."""
    test = checkout / TEST_FILE
    if not test.is_file():
        raise UpstreamTestError(
            f"{test}: no such file; pass --sglang-checkout pointing at a clone of "
            f"sgl-project/sglang at tag {release_tag(sglang_version)}"
        )
    tag = checkout_tag(checkout)
    if tag is not None and tag != release_tag(sglang_version):
        raise UpstreamTestError(
            f"{checkout} is at {tag}, the stack runs sglang {sglang_version}: "
            f"git -C {checkout} checkout {release_tag(sglang_version)}"
        )
    return [str(python), str(test)]
