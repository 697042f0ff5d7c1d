"""The sglang command lines, per sglang release and matrix cell.

Piecewise CUDA graphs (sglang's ``PiecewiseCudaGraphRunner``), per release:

- 0.5.9: opt-in, ``--enable-piecewise-cuda-graph`` (server_args.py ``enable_piecewise_cuda_graph``;
  ModelRunner.init_piecewise_cuda_graphs returns unless it is set).  NSA models (GLM-5,
  DeepSeek-V3.2) too: the series' backport of sglang PR #23351 (topic
  ``nsa-piecewise-cuda-graph``) makes them traceable, and this release has no rule that
  turns piecewise off for them.
- 0.5.10, 0.5.11: on by default, ``--disable-piecewise-cuda-graph`` turns it off (the old
  enable flag is a deprecated no-op).  ``ServerArgs._handle_piecewise_cuda_graph`` switches
  it off by itself for some setups, among them NSA models
  (``ModelConfig.is_piecewise_cuda_graph_disabled_model``: ``is_deepseek_nsa``), which the
  series keeps; ``--enforce-piecewise-cuda-graph`` skips every such rule, and with the
  backport NSA models then trace.  NSA cells therefore pass it.

The server log says whether the piecewise graphs were really captured
(:data:`PIECEWISE_CAPTURED_MARKER`); tests/integration checks every flag chosen here
against each release's own ``server_args.py`` and argument handling.
"""

from __future__ import annotations

import dataclasses
import enum
import pathlib
import re
from collections.abc import Sequence

from packaging.version import Version

from ..model.families import Family
from .matrix import Cell, Fusion, StartOrder

# Logged by ModelRunner.init_piecewise_cuda_graphs once capture finished (0.5.9 ... 0.5.11).
PIECEWISE_CAPTURED_MARKER = "Capture piecewise CUDA graph end"
# The first release where piecewise CUDA graphs are on by default.
DEFAULT_ON_SINCE = Version("0.5.10")


class Piecewise(enum.Enum):
    ON = "on"
    OFF = "off"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PiecewiseFlags:
    """The launch_server flags that turn piecewise CUDA graphs on and off."""

    on: tuple[str, ...]
    off: tuple[str, ...]

    def for_mode(self, mode: Piecewise) -> tuple[str, ...]:
        return self.on if mode is Piecewise.ON else self.off

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.on + self.off)


def _base(sglang_version: str) -> Version:
    return Version(Version(sglang_version).base_version)


def piecewise_flags(sglang_version: str, family: Family | None = None) -> PiecewiseFlags:
    """Flags for ``sglang_version`` (an upstream version, a local label is ignored)."""
    if _base(sglang_version) < DEFAULT_ON_SINCE:
        return PiecewiseFlags(on=("--enable-piecewise-cuda-graph",), off=())
    on: tuple[str, ...] = ("--enforce-piecewise-cuda-graph",) if family is not None and family.nsa else ()
    return PiecewiseFlags(on=on, off=("--disable-piecewise-cuda-graph",))


def cell_flags(cell: Cell) -> tuple[str, ...]:
    """The launch_server flags of a cell, the same with piecewise on and off."""
    flags: list[str] = []
    if cell.start_order is StartOrder.NO_CUDA_GRAPH:
        flags.append("--disable-cuda-graph")
    if cell.moe_backend is not None:
        flags += ["--moe-runner-backend", cell.moe_backend]
    if cell.fusion is Fusion.OFF:
        flags.append("--disable-shared-experts-fusion")
    return tuple(flags)


def server_args(
    *,
    sglang_version: str,
    model_path: pathlib.Path | str,
    cell: Cell,
    mode: Piecewise,
    tp: int,
    port: int,
    host: str = "127.0.0.1",
    extra: Sequence[str] = (),
) -> list[str]:
    """The arguments of ``sglang.launch_server`` for ``cell`` with piecewise ``mode``."""
    return [
        "--model-path",
        str(model_path),
        "--quantization",
        "modelopt_fp4",
        "--tp-size",
        str(tp),
        "--host",
        host,
        "--port",
        str(port),
        *cell_flags(cell),
        *piecewise_flags(sglang_version, cell.family).for_mode(mode),
        *extra,
    ]


def server_command(
    python: pathlib.Path | str,
    *,
    sglang_version: str,
    model_path: pathlib.Path | str,
    cell: Cell,
    mode: Piecewise,
    tp: int,
    port: int,
    extra: Sequence[str] = (),
) -> list[str]:
    """``python -m sglang.launch_server`` + :func:`server_args`."""
    args = server_args(
        sglang_version=sglang_version, model_path=model_path, cell=cell, mode=mode, tp=tp,
        port=port, extra=extra,
    )
    return [str(python), "-m", "sglang.launch_server", *args]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BenchSettings:
    """One bench_serving run: random token ids (no dataset download), fixed lengths."""

    concurrency: int
    num_prompts: int
    input_len: int
    output_len: int
    seed: int = 1


def bench_command(
    python: pathlib.Path | str,
    *,
    base_url: str,
    model_path: pathlib.Path | str,
    settings: BenchSettings,
    output_file: pathlib.Path,
) -> list[str]:
    """``python -m sglang.bench_serving`` (flags present in 0.5.9 ... 0.5.11)."""
    return [
        str(python),
        "-m",
        "sglang.bench_serving",
        "--backend",
        "sglang",
        "--base-url",
        base_url,
        "--model",
        str(model_path),
        "--tokenizer",
        str(model_path),
        "--dataset-name",
        "random-ids",
        "--random-input-len",
        str(settings.input_len),
        "--random-output-len",
        str(settings.output_len),
        "--random-range-ratio",
        "1.0",
        "--num-prompts",
        str(settings.num_prompts),
        "--max-concurrency",
        str(settings.concurrency),
        "--seed",
        str(settings.seed),
        "--output-file",
        str(output_file),
        "--disable-tqdm",
    ]


_FLAG = re.compile(r"""["'](--[a-z0-9][a-z0-9-]*)["']""")


def declared_flags(source: str) -> frozenset[str]:
    """Every ``"--flag"`` string literal in an argparse module's source.

    Used against sglang's own ``srt/server_args.py`` and ``bench_serving.py`` to check that
    the flags chosen here exist in the version being run.
    """
    return frozenset(_FLAG.findall(source))
