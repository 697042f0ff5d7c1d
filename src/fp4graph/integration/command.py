"""``python -m fp4graph integration``: sglang + patched wheels on SM120, piecewise on vs off.

Steps: check for SM120 GPUs (nvidia-smi; skip when there are none), create a venv with the
stack's exact ``==X+fp4graph.N`` pins and sglang's full dependencies, confirm the GPUs from
torch in that venv, write the tiny NVFP4 checkpoint (unless ``--model-path``), then for
piecewise off and on: launch sglang, greedy-generate the fixed prompts, run bench_serving at
each concurrency; finally compare the generations and write the report.

Exit codes: 0 passed, or skipped (the line ``integration: SKIPPED: <reason>`` says so and the
report's ``status`` is ``"skipped"``); 1 a check failed (crash, different greedy output,
piecewise not active); 2 an Fp4graphError (bad stack, install failed, ...).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import subprocess
from collections.abc import Sequence
from typing import Any

from ..model.config import default_cache_dir, find_checkout
from ..model.errors import Fp4graphError
from . import benchmark, device, flags, plan, server, sglang_suite

SKIPPED = "integration: SKIPPED:"
SRC = pathlib.Path(__file__).resolve().parents[2]  # .../src, put on the venv's PYTHONPATH


@dataclasses.dataclass(frozen=True, kw_only=True)
class Layout:
    """Where a run keeps its things."""

    repo: pathlib.Path
    work_dir: pathlib.Path
    output: pathlib.Path

    @property
    def checkpoint(self) -> pathlib.Path:
        return self.work_dir / "tiny-nvfp4-llama"

    @property
    def logs(self) -> pathlib.Path:
        return self.output / "logs"


def _layout(args: argparse.Namespace) -> Layout:
    repo = find_checkout()
    work = args.work_dir or default_cache_dir() / "integration" / args.stack
    return Layout(repo=repo, work_dir=work, output=args.output or repo / "wheels" / "reports" / "integration")


def _bench_settings(args: argparse.Namespace, level: int) -> flags.BenchSettings:
    return flags.BenchSettings(
        concurrency=level,
        num_prompts=max(8, args.prompts_per_level * level),
        input_len=args.input_len,
        output_len=args.output_len,
    )


def describe(args: argparse.Namespace, layout: Layout, install: plan.InstallPlan) -> list[str]:
    """The plan as lines of text (what --dry-run prints)."""
    version = install.pins.sglang_version
    model = args.model_path or layout.checkpoint
    lines = [
        f"stack: {args.stack} (pins from {install.pins.source})",
        "pins: " + " ".join(p.requirement for p in install.pins.pins),
        f"venv: {install.venv}",
        "device check: nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader "
        f"(needs {args.tp} SM120 GPU(s); else SKIPPED, exit 0)",
    ]
    lines += ["install: " + plan.render(c) for c in install.commands()]
    if args.model_path is None:
        lines.append(
            f"checkpoint: PYTHONPATH={SRC} {install.python} -m fp4graph.integration.checkpoint {model}"
        )
    base_url = "http://127.0.0.1:PORT"
    for mode in (flags.Piecewise.OFF, flags.Piecewise.ON):
        cmd = flags.server_command(
            install.python, sglang_version=version, model_path=model, mode=mode, tp=args.tp,
            port=0, extra=args.server_arg,
        )
        lines.append(f"server piecewise {mode.value}: " + plan.render(cmd).replace("--port 0", "--port PORT"))
        lines.append(f"  generate: POST {base_url}/generate ({len(server.PROMPTS)} prompts, greedy)")
        if not args.skip_bench:
            for level in args.concurrency:
                out = layout.output / f"bench-{mode.value}-c{level}.jsonl"
                cmd = flags.bench_command(
                    install.python, base_url=base_url, model_path=model,
                    settings=_bench_settings(args, level), output_file=out,
                )
                lines.append(f"  bench c={level}: " + plan.render(cmd))
    if args.sglang_checkout:
        lines.append(f"upstream test: {install.python} {args.sglang_checkout / sglang_suite.TEST_FILE}")
    lines.append(f"report: {layout.output / 'report.md'} and report.json")
    return lines


def _run_logged(command: Sequence[str], log: pathlib.Path, env: dict[str, str] | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as f:
        f.write(("$ " + plan.render(command) + "\n").encode())
        f.flush()
        code = subprocess.run(
            list(command), stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        ).returncode
    if code != 0:
        raise Fp4graphError(f"{plan.render(command)} exited {code}; see {log}")


def _skip(layout: Layout, context: dict[str, Any], reason: str) -> int:
    print(f"{SKIPPED} {reason}")
    benchmark.write_report(layout.output, [], {**context, "status": "skipped", "reason": reason})
    return 0


def run(args: argparse.Namespace) -> int:
    layout = _layout(args)
    install = plan.make_plan(
        repo=layout.repo, stack=args.stack, work_dir=layout.work_dir, base_python=args.python,
        wheels_dir=args.wheels_dir, index_url=args.index_url,
    )
    if args.dry_run:
        print("\n".join(describe(args, layout, install)))
        return 0
    version = install.pins.sglang_version
    context: dict[str, Any] = {
        "stack": args.stack,
        "pins": [p.requirement for p in install.pins.pins],
        "tp": args.tp,
        "model": str(args.model_path or "tiny generated NVFP4 Llama"),
    }
    reason = device.probe_nvidia_smi().skip_reason(args.tp)
    if reason:
        return _skip(layout, context, reason)

    logs = layout.logs
    for command in install.commands():
        print(f"$ {plan.render(command)}", flush=True)
        _run_logged(command, logs / "install.log")
    reason = device.probe_torch(install.python).skip_reason(args.tp)
    if reason:
        return _skip(layout, context, reason)

    model = args.model_path
    if model is None:
        model = layout.checkpoint
        _run_logged(
            [str(install.python), "-m", "fp4graph.integration.checkpoint", str(model)],
            logs / "checkpoint.log", env={"PYTHONPATH": str(SRC)},
        )

    generations: dict[flags.Piecewise, list[server.Completion]] = {}
    results: dict[tuple[flags.Piecewise, int], benchmark.BenchMetrics] = {}
    problems: list[str] = []
    for mode in (flags.Piecewise.OFF, flags.Piecewise.ON):
        port = server.free_port()
        base_url = f"http://127.0.0.1:{port}"
        command = flags.server_command(
            install.python, sglang_version=version, model_path=model, mode=mode, tp=args.tp,
            port=port, extra=args.server_arg,
        )
        print(f"piecewise {mode.value}: $ {plan.render(command)}", flush=True)
        with server.launched(
            command, base_url=base_url, log=logs / f"server-{mode.value}.log", timeout=args.server_timeout
        ) as running:
            print(f"piecewise {mode.value}: healthy after {running.startup_s:.0f} s", flush=True)
            generations[mode] = server.generate(base_url, server.PROMPTS)
            if not args.skip_bench:
                for level in args.concurrency:
                    out = layout.output / f"bench-{mode.value}-c{level}.jsonl"
                    out.unlink(missing_ok=True)
                    cmd = flags.bench_command(
                        install.python, base_url=base_url, model_path=model,
                        settings=_bench_settings(args, level), output_file=out,
                    )
                    _run_logged(cmd, logs / f"bench-{mode.value}-c{level}.log")
                    results[(mode, level)] = benchmark.parse_jsonl(out)
                    print(f"piecewise {mode.value} c={level}: "
                          f"{results[(mode, level)].output_throughput:.1f} output tok/s", flush=True)
            captured = flags.PIECEWISE_CAPTURED_MARKER in running.log_text()
        if mode is flags.Piecewise.ON and not captured:
            problems.append(
                f"piecewise on: the server log lacks {flags.PIECEWISE_CAPTURED_MARKER!r} "
                "(sglang switched piecewise CUDA graphs off?)"
            )
        if mode is flags.Piecewise.OFF and captured:
            problems.append("piecewise off: the server still captured piecewise CUDA graphs")

    mismatches = server.compare(generations[flags.Piecewise.ON], generations[flags.Piecewise.OFF])
    for m in mismatches:
        problems.append(
            f"greedy output differs for {m.prompt!r} (first token {m.first_divergent_token}): "
            f"on {m.on!r} vs off {m.off!r}"
        )
    if args.sglang_checkout:
        cmd = sglang_suite.test_command(install.python, args.sglang_checkout, version)
        try:
            _run_logged(cmd, logs / "upstream-test.log")
        except Fp4graphError as exc:
            problems.append(f"upstream piecewise test failed: {exc}")

    rows = [
        benchmark.Row(
            concurrency=level,
            on=results.get((flags.Piecewise.ON, level)),
            off=results.get((flags.Piecewise.OFF, level)),
        )
        for level in ([] if args.skip_bench else args.concurrency)
    ]
    context.update(
        status="failed" if problems else "passed",
        problems=problems,
        generations={m.value: [dataclasses.asdict(c) for c in g] for m, g in generations.items()},
    )
    md, js = benchmark.write_report(layout.output, rows, context)
    print(f"report: {md} {js}")
    for p in problems:
        print(f"FAILED: {p}")
    return 1 if problems else 0
