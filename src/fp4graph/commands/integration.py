"""``python -m fp4graph integration``: the model-family matrix under sglang on SM120.

Exit codes: 0 every cell passed, or skipped (the line ``integration: SKIPPED: <reason>``
says so and the report's ``status`` is ``"skipped"``); 1 a cell failed (crash, different
greedy output, piecewise not active); 2 an Fp4graphError (bad stack, install failed, ...).
``--device-check`` only looks for the GPUs (``--json``: one object, for the nox session).
"""

from __future__ import annotations

import argparse
import json
import pathlib

from ..integration import dry_run, matrix, runner
from ..integration.options import BENCH_CHOICES, IntegrationOptions
from ..model import families, log

NAME = "integration"
HELP = "sglang on SM120: the model-family matrix, piecewise on vs off, greedy check, bench report"
SKIPPED = "integration: SKIPPED:"
_DEFAULT = IntegrationOptions(stack="")


def _concurrency(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: concurrency levels must be >= 1")
    return levels


def add_arguments(parser: argparse.ArgumentParser) -> None:
    p, d = parser, _DEFAULT
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
    p.add_argument("--installer", choices=("pip", "uv"), default=d.installer, help="what installs the stack")
    p.add_argument("--check", action="append", default=[], metavar="NAME=SCRIPT [ARGS]",
                   help="after the import smoke, a script of the checkout run by the venv's python "
                        "(as python -m fp4graph install --check)")
    p.add_argument("--tp", type=int, default=d.tp, help="tensor parallel size (default 1)")
    p.add_argument("--concurrency", type=_concurrency, default=d.concurrency,
                   help="bench_serving concurrency levels (default 1,10,256,1024)")
    p.add_argument("--bench", choices=BENCH_CHOICES, default=d.bench,
                   help="cells to benchmark: primary (MoE backend auto, fusion on; both start orders), "
                        "all, none (default primary)")
    p.add_argument("--skip-bench", action="store_true", help="same as --bench none")
    p.add_argument("--input-len", type=int, default=d.input_len, help="prompt tokens per request")
    p.add_argument("--output-len", type=int, default=d.output_len, help="generated tokens per request")
    p.add_argument("--prompts-per-level", type=int, default=d.prompts_per_level,
                   help="num prompts = max(8, this x concurrency)")
    p.add_argument("--output", type=pathlib.Path,
                   help="report dir (default <repo>/wheels/reports/integration)")
    p.add_argument("--work-dir", type=pathlib.Path,
                   help="venvs, checkpoints (default the fp4graph cache)")
    p.add_argument("--python", default=d.python, help="interpreter the venvs are made from")
    p.add_argument("--sglang-checkout", type=pathlib.Path,
                   help="sglang clone at the pinned tag: also run its piecewise test file")
    p.add_argument("--server-timeout", type=float, default=d.server_timeout, help="seconds to wait for health")
    p.add_argument("--server-arg", action="append", default=[], help="extra launch_server argument")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    p.add_argument("--device-check", action="store_true",
                   help="only check for the SM120 GPUs the run needs (prints the skip line)")
    p.add_argument("--json", action="store_true",
                   help="with --device-check: print the answer as one JSON object")


def options(args: argparse.Namespace) -> IntegrationOptions:
    return IntegrationOptions(
        stack=args.stack,
        families=tuple(args.family or ()),
        start_orders=tuple(matrix.StartOrder(s) for s in args.start_order or ()),
        moe_backends=tuple(args.moe_runner_backend or ()),
        fusions=tuple(matrix.Fusion(f) for f in args.shared_experts_fusion or ()),
        model_path=args.model_path, wheels_dir=args.wheels_dir, index_url=args.index_url,
        tp=args.tp, concurrency=tuple(args.concurrency), bench="none" if args.skip_bench else args.bench,
        input_len=args.input_len, output_len=args.output_len, prompts_per_level=args.prompts_per_level,
        output=args.output, work_dir=args.work_dir, python=args.python,
        sglang_checkout=args.sglang_checkout, server_timeout=args.server_timeout,
        server_args=tuple(args.server_arg), installer=args.installer,
        checks=tuple((name, cmd) for name, _, cmd in (c.partition("=") for c in args.check)),
    )


def _print_flushed(line: str) -> None:
    print(line, flush=True)


def run(args: argparse.Namespace) -> int:
    chosen = options(args)
    if args.dry_run:
        print("\n".join(dry_run.describe(chosen)))
        return 0
    if args.device_check:
        check = runner.device_check(chosen)
        if args.json:
            print(json.dumps(check.as_dict()))
        elif check.skip_reason:
            print(f"{SKIPPED} {check.skip_reason}")
        else:
            print(f"integration: {check.tp} SM120 GPU(s) found")
        return 0
    with log.progress_to(_print_flushed):
        outcome = runner.run(chosen)
    if outcome.status == "skipped":
        print(f"{SKIPPED} {outcome.reason}")
        return 0
    if outcome.report is not None:
        print(f"report: {outcome.report[0]} {outcome.report[1]}")
    for failure in outcome.failures:
        print(f"FAILED: {failure}")
    return outcome.exit_code
