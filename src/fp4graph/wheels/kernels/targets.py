"""What a kernels build targets: SM12x archs, FlashInfer fp4 module kinds, and the wheel's version.

An arch is what ``FLASHINFER_CUDA_ARCH_LIST`` takes (``12.0a``: RTX PRO 6000 and RTX 50xx;
``12.1a``: DGX Spark's GB10).  A kind is a ``flashinfer.fp4_warmup`` module kind; the
module names come from the patched flashinfer's own getters for that device (they carry
its arch: ``fp4_quantization_120`` vs ``_121``), so one wheel per arch: a GB10 user
installs only the SM121 one, and modules whose name does not carry the arch
(``fp4_gemm_cutlass_sm120`` serves both) are built for the wheel's arch alone.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence

from packaging.version import Version

from ...model.errors import Fp4graphError
from ...model.warmup import DEFAULT_KINDS

# The distribution FlashInfer's loader looks for (``import flashinfer_jit_cache``).
PROJECT = "flashinfer-jit-cache"

# ``flashinfer.fp4_warmup`` kinds (FP4_MODULE_KINDS of the series' fp4_warmup.py).
FP4_KINDS = ("quantization", "gemm_cutlass", "gemm_trtllm", "moe_cutlass", "moe_trtllm")
# fp4graph's own one-kernel module, built through the same JIT machinery in seconds: what
# CI builds and loads (worker.PROBE_SOURCE).
PROBE = "probe"
KINDS = (*FP4_KINDS, PROBE)

_ARCH = re.compile(r"(?P<major>\d+)\.(?P<minor>\d)(?P<suffix>a)")
SUPPORTED_ARCHS = ("12.0a", "12.1a")


class KernelsError(Fp4graphError):
    """A kernels build was asked for something it cannot build, or its build failed."""


@dataclasses.dataclass(frozen=True, order=True, slots=True)
class Arch:
    """One SM12x target, as ``FLASHINFER_CUDA_ARCH_LIST`` spells it (``12.0a``)."""

    major: int
    minor: int
    suffix: str = "a"

    @classmethod
    def parse(cls, text: str) -> Arch:
        m = _ARCH.fullmatch(text.strip())
        arch = cls(int(m["major"]), int(m["minor"]), m["suffix"]) if m else None
        if arch is None or str(arch) not in SUPPORTED_ARCHS:
            raise KernelsError(
                f"arch {text!r} is not an SM12x target fp4graph builds: use "
                f"{' or '.join(SUPPORTED_ARCHS)} (12.0a: RTX PRO 6000 / RTX 50xx, 12.1a: DGX Spark GB10), "
                "as FLASHINFER_CUDA_ARCH_LIST spells them"
            )
        return arch

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}{self.suffix}"

    @property
    def sm(self) -> str:
        """``sm120a``: the wheel's local-label part and the probe module's suffix."""
        return f"sm{self.major}{self.minor}{self.suffix}"


def parse_archs(texts: Iterable[str]) -> tuple[Arch, ...]:
    """``12.0a,12.1a`` (one or more comma-separated lists) -> sorted, without repeats."""
    archs = {Arch.parse(t) for text in texts for t in text.split(",") if t.strip()}
    if not archs:
        raise KernelsError(f"no arch given: use {' or '.join(SUPPORTED_ARCHS)}")
    return tuple(sorted(archs))


def parse_kinds(texts: Iterable[str]) -> tuple[str, ...]:
    """Module kinds, comma-separated, in :data:`KINDS` order; an unknown one is refused."""
    given = [k.strip() for text in texts for k in text.split(",") if k.strip()]
    unknown = sorted(set(given) - set(KINDS))
    if unknown:
        raise KernelsError(f"unknown module kind(s) {', '.join(map(repr, unknown))}: "
                           f"the kinds are {', '.join(KINDS)} (flashinfer.fp4_warmup's, and {PROBE!r})")
    if not given:
        raise KernelsError(f"no module kind given: the kinds are {', '.join(KINDS)}")
    return tuple(k for k in KINDS if k in given)


def default_kinds(sglang: str | None, stack: str) -> tuple[str, ...]:
    """The kinds the warm-up of ``stack``'s sglang requests with the default server."""
    kinds = DEFAULT_KINDS.get(sglang or "")
    if kinds is None:
        raise KernelsError(
            f"stack {stack!r} has no default module list (sglang {sglang or 'none'} has no row in "
            f"fp4graph.model.warmup.DEFAULT_KINDS): name the modules with --modules ({', '.join(KINDS)})"
        )
    return kinds


def cuda_label(nvcc_release: str) -> str:
    """``13.0`` -> ``cu130``, as flashinfer-jit-cache versions name the toolkit."""
    release = Version(nvcc_release)
    return f"cu{release.major}{release.minor}"


def wheel_version(flashinfer: Version, revision: int, nvcc_release: str, arch: Arch, kinds: Sequence[str]) -> Version:
    """``0.6.3+cu130.fp4graph.4.sm120a``: the flashinfer release (what its loader compares),
    the CUDA toolkit, the patched flashinfer's revision it was built from, and the arch; a
    wheel of the probe alone (CI's) says ``.probe`` too, never to be taken for the fp4 one."""
    probe = ".probe" if set(kinds) == {PROBE} else ""
    return Version(f"{flashinfer.public}+{cuda_label(nvcc_release)}.fp4graph.{revision}.{arch.sm}{probe}")


def describe(kinds: Sequence[str]) -> str:
    return ", ".join(kinds) or "none"
