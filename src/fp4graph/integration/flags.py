"""The sglang command lines, per sglang version.

Piecewise CUDA graphs (sglang's ``--enable-piecewise-cuda-graph`` feature) are opt-in up to
0.5.9 and on by default from 0.5.10 (``--disable-piecewise-cuda-graph`` turns them off; the old
enable flag stays as a deprecated no-op).  From 0.5.10 sglang may also switch them off by
itself (speculative decoding, DP attention, NSA models, ...): the server log says whether the
piecewise graphs were really captured (:data:`PIECEWISE_CAPTURED_MARKER`).
"""

from __future__ import annotations

import dataclasses
import enum
import pathlib
import re
from collections.abc import Sequence

from packaging.version import Version

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


def piecewise_flags(sglang_version: str) -> PiecewiseFlags:
    """Flags for ``sglang_version`` (an upstream version, a local label is ignored)."""
    version = Version(Version(sglang_version).base_version)
    if version < DEFAULT_ON_SINCE:
        return PiecewiseFlags(on=("--enable-piecewise-cuda-graph",), off=())
    return PiecewiseFlags(on=(), off=("--disable-piecewise-cuda-graph",))


def server_command(
    python: pathlib.Path | str,
    *,
    sglang_version: str,
    model_path: pathlib.Path | str,
    mode: Piecewise,
    tp: int,
    port: int,
    host: str = "127.0.0.1",
    extra: Sequence[str] = (),
) -> list[str]:
    """``python -m sglang.launch_server`` with NVFP4 weights and piecewise ``mode``."""
    return [
        str(python),
        "-m",
        "sglang.launch_server",
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
        *piecewise_flags(sglang_version).for_mode(mode),
        *extra,
    ]


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
