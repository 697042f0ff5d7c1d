"""``python -m fp4graph integration``: the model-family matrix under sglang on SM120."""

from __future__ import annotations

import argparse
import pathlib
import sys

from ..integration import benchmark, command, families, matrix

NAME = "integration"
HELP = "sglang on SM120: the model-family matrix, piecewise on vs off, greedy check, bench report"


def _concurrency(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: concurrency levels must be >= 1")
    return levels


def add_arguments(parser: argparse.ArgumentParser) -> None:
    p = parser
    p.add_argument("--stack", required=True, help="stack from patches/stacks.toml, e.g. sglang-0.5.9")
    cells = p.add_argument_group("matrix (each option repeatable; default: every value)")
    cells.add_argument("--family", action="append", choices=sorted(families.FAMILIES), help="model family")
    cells.add_argument("--start-order", action="append", choices=[s.value for s in matrix.StartOrder],
                       help="default (decode CUDA graphs first) or no-cuda-graph (--disable-cuda-graph)")
    cells.add_argument("--moe-runner-backend", action="append", choices=matrix.MOE_BACKENDS,
                       help="MoE families: sglang's MoE runner backend")
    cells.add_argument("--shared-experts-fusion", action="append", choices=[f.value for f in matrix.Fusion],
                       help="families with a shared expert: sglang's shared-experts fusion on or off")
    p.add_argument("--model-path", type=pathlib.Path,
                   help="an NVFP4 checkpoint of a known family instead of the generated ones")
    p.add_argument("--wheels-dir", type=pathlib.Path, help="patched wheels (default <repo>/wheels)")
    p.add_argument("--index-url", help="index serving the patched wheels (added to PyPI)")
    p.add_argument("--tp", type=int, default=1, help="tensor parallel size (default 1)")
    p.add_argument("--concurrency", type=_concurrency, default=benchmark.CONCURRENCY,
                   help="bench_serving concurrency levels (default 1,10,256,1024)")
    p.add_argument("--bench", choices=command.BENCH_CHOICES, default="primary",
                   help="cells to benchmark: primary (MoE backend auto, fusion on; both start orders), "
                        "all, none (default primary)")
    p.add_argument("--skip-bench", action="store_true", help="same as --bench none")
    p.add_argument("--input-len", type=int, default=1024, help="prompt tokens per request")
    p.add_argument("--output-len", type=int, default=256, help="generated tokens per request")
    p.add_argument("--prompts-per-level", type=int, default=2,
                   help="num prompts = max(8, this x concurrency)")
    p.add_argument("--output", type=pathlib.Path,
                   help="report dir (default <repo>/wheels/reports/integration)")
    p.add_argument("--work-dir", type=pathlib.Path,
                   help="venvs, checkpoints (default the fp4graph cache)")
    p.add_argument("--python", default=sys.executable, help="interpreter the venvs are made from")
    p.add_argument("--sglang-checkout", type=pathlib.Path,
                   help="sglang clone at the pinned tag: also run its piecewise test file")
    p.add_argument("--server-timeout", type=float, default=1800, help="seconds to wait for health")
    p.add_argument("--server-arg", action="append", default=[], help="extra launch_server argument")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    p.add_argument("--device-check", action="store_true",
                   help="only check for the SM120 GPUs the run needs (prints the skip line)")


def run(args: argparse.Namespace) -> int:
    return command.run(args)
