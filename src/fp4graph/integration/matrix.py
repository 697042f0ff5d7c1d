"""The integration matrix: which server configurations run, one :class:`Cell` each.

A cell is a family and the server settings that change how sglang builds and starts it:

- the start order: ``default`` (the decode CUDA graphs are captured first, so the model
  has run eagerly before piecewise compile) or ``no-cuda-graph`` (``--disable-cuda-graph``
  with piecewise on: piecewise compile is the model's first forward, how the seed's user
  started GLM-5);
- the MoE runner backend (MoE families): ``auto`` (on SM120 sgl_kernel's cutlass fp4 MoE)
  or ``flashinfer_cutlass`` (FlashInfer's ``cutlass_fused_moe``);
- shared-experts fusion (families with a shared expert): on (sglang's default where the
  model allows it) or off (``--disable-shared-experts-fusion``).

Every cell is started twice, piecewise CUDA graphs off and on (:mod:`.flags`), and the two
greedy outputs must be identical.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
from collections.abc import Iterable, Sequence

from ..model.errors import ConfigError
from ..model.families import FAMILIES, Family


class StartOrder(enum.Enum):
    DEFAULT = "default"
    NO_CUDA_GRAPH = "no-cuda-graph"


class Fusion(enum.Enum):
    ON = "on"
    OFF = "off"


MOE_BACKENDS = ("auto", "flashinfer_cutlass")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Cell:
    family: Family
    start_order: StartOrder
    moe_backend: str | None = None  # None: a dense family
    fusion: Fusion | None = None  # None: no shared expert

    @property
    def id(self) -> str:
        parts = [self.family.name, self.start_order.value]
        if self.moe_backend is not None:
            parts.append(f"moe-{self.moe_backend}")
        if self.fusion is not None:
            parts.append(f"fusion-{self.fusion.value}")
        return "/".join(parts)

    @property
    def slug(self) -> str:
        """The id as a file name."""
        return self.id.replace("/", "_")

    @property
    def primary(self) -> bool:
        """The cells benchmarked by default: sglang's own MoE backend and fusion default,
        both start orders."""
        return self.moe_backend in (None, "auto") and self.fusion in (None, Fusion.ON)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Selection:
    """What the command line selects; empty means everything.  Each filter restricts its own
    axis; a family without that axis (a dense model and the MoE backend) is not dropped."""

    families: Sequence[str] = ()
    start_orders: Sequence[StartOrder] = ()
    moe_backends: Sequence[str] = ()
    fusions: Sequence[Fusion] = ()
    # The stack's sglang: families it has no model class for are left out (asked for by
    # name, an error).  None: every family.
    sglang_version: str | None = None

    def cells(self, only: Family | None = None) -> list[Cell]:
        """The selected cells, in a stable order (family, start order, backend, fusion).

        ``only``: the family of a user checkpoint (``--model-path``), instead of ``families``.
        """
        unknown = sorted(set(self.families) - set(FAMILIES))
        if unknown:
            raise ConfigError(f"unknown --family {', '.join(unknown)}; known: {', '.join(FAMILIES)}")
        bad = sorted(set(self.moe_backends) - set(MOE_BACKENDS))
        if bad:
            raise ConfigError(f"unknown --moe-runner-backend {', '.join(bad)}; known: {', '.join(MOE_BACKENDS)}")
        asked = [only] if only is not None else [FAMILIES[n] for n in self.families]
        if self.sglang_version is not None:
            if missing := [f for f in asked if not f.in_sglang(self.sglang_version)]:
                raise ConfigError("; ".join(
                    f"sglang {self.sglang_version} has no model class for {f.name} ({f.architecture}, "
                    f"new in {f.min_sglang})" for f in missing))
        families = asked or [f for f in FAMILIES.values() if f in self.available()]
        return [cell for family in families for cell in _cells(family, self)]

    def available(self) -> list[Family]:
        """The families the stack's sglang has a model class for."""
        v = self.sglang_version
        return [f for f in FAMILIES.values() if v is None or f.in_sglang(v)]

    def left_out(self) -> list[Family]:
        """The families left out because the stack's sglang lacks their model class."""
        return [f for f in FAMILIES.values() if f not in self.available()]


def _cells(family: Family, selection: Selection) -> Iterable[Cell]:
    """A filter restricts its own axis; a family without that axis keeps its cells."""
    orders = selection.start_orders or list(StartOrder)
    backends: list[str | None] = [*(selection.moe_backends or MOE_BACKENDS)] if family.moe else [None]
    fusions: list[Fusion | None] = [*(selection.fusions or Fusion)] if family.shared_experts else [None]
    for order, backend, fusion in itertools.product(orders, backends, fusions):
        yield Cell(family=family, start_order=order, moe_backend=backend, fusion=fusion)
