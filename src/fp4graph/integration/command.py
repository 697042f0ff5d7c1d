"""``python -m fp4graph integration``: the model-family matrix under sglang on SM120.

Steps: check for SM120 GPUs (nvidia-smi; skip when there are none), create a venv with the
stack's exact ``==X+fp4graph.N`` pins and sglang's full dependencies, confirm the GPUs from
torch in that venv, give families whose model type the pinned transformers lacks a second
venv with a newer transformers, write one tiny NVFP4 checkpoint per family (unless
``--model-path``), then for every matrix cell (:mod:`.matrix`) and piecewise off and on:
launch sglang, greedy-generate the fixed prompts, run bench_serving at each concurrency
(benchmarked cells); finally compare the generations and write the report (:mod:`.report`).

Exit codes: 0 every cell passed, or skipped (the line ``integration: SKIPPED: <reason>``
says so and the report's ``status`` is ``"skipped"``); 1 a cell failed (crash, different
greedy output, piecewise not active); 2 an Fp4graphError (bad stack, install failed, ...).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

from ..model.config import default_cache_dir, find_checkout
from ..model.errors import ConfigError, Fp4graphError
from . import benchmark, device, flags, plan, server, sglang_suite
from .families import FAMILIES, NEWER_TRANSFORMERS, Family, Size, by_architecture
from .matrix import Cell, Fusion, Selection, StartOrder
from .report import CellResult, Run
from .report import write as write_report

SKIPPED = "integration: SKIPPED:"
SRC = pathlib.Path(__file__).resolve().parents[2]  # .../src, put on the venv's PYTHONPATH
BENCH_CHOICES = ("primary", "all", "none")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Layout:
    """Where a run keeps its things."""

    repo: pathlib.Path
    work_dir: pathlib.Path
    output: pathlib.Path

    def checkpoint(self, family: Family) -> pathlib.Path:
        return self.work_dir / "checkpoints" / f"tiny-nvfp4-{family.name}"

    @property
    def logs(self) -> pathlib.Path:
        return self.output / "logs"

    def cell_logs(self, cell: Cell) -> pathlib.Path:
        return self.logs / cell.slug

    def bench_file(self, cell: Cell, mode: flags.Piecewise, level: int) -> pathlib.Path:
        return self.output / "bench" / cell.slug / f"{mode.value}-c{level}.jsonl"


def _layout(args: argparse.Namespace) -> Layout:
    repo = find_checkout()
    work = args.work_dir or default_cache_dir() / "integration" / args.stack
    return Layout(repo=repo, work_dir=work, output=args.output or repo / "wheels" / "reports" / "integration")


def user_family(model_path: pathlib.Path) -> Family:
    """The family of a user checkpoint, from its config.json."""
    config_path = model_path / "config.json"
    try:
        architectures = json.loads(config_path.read_text()).get("architectures") or []
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{config_path}: cannot read the model's architecture ({exc})") from None
    family = by_architecture(architectures[0]) if architectures else None
    if family is None:
        known = ", ".join(f.architecture for f in FAMILIES.values())
        raise ConfigError(f"{config_path}: architectures {architectures!r} is none of {known}")
    return family


def selection(args: argparse.Namespace, sglang_version: str | None = None) -> Selection:
    return Selection(
        families=args.family or (),
        start_orders=[StartOrder(s) for s in args.start_order or ()],
        moe_backends=args.moe_runner_backend or (),
        fusions=[Fusion(f) for f in args.shared_experts_fusion or ()],
        sglang_version=sglang_version,
    )


def selected_cells(args: argparse.Namespace, sglang_version: str | None = None) -> list[Cell]:
    chosen = selection(args, sglang_version)
    if args.model_path is not None:
        if args.family:
            raise ConfigError("--family selects generated checkpoints; --model-path brings its own")
        return chosen.cells(only=user_family(args.model_path))
    return chosen.cells()


def _bench_mode(args: argparse.Namespace) -> str:
    return "none" if args.skip_bench else str(args.bench)


def benched(cell: Cell, args: argparse.Namespace) -> bool:
    mode = _bench_mode(args)
    return mode == "all" or (mode == "primary" and cell.primary)


def _bench_settings(args: argparse.Namespace, level: int) -> flags.BenchSettings:
    return flags.BenchSettings(
        concurrency=level,
        num_prompts=max(8, args.prompts_per_level * level),
        input_len=args.input_len,
        output_len=args.output_len,
    )


def _model_path(args: argparse.Namespace, layout: Layout, family: Family) -> pathlib.Path:
    return args.model_path if args.model_path is not None else layout.checkpoint(family)


def checkpoint_command(python: pathlib.Path | str, out: pathlib.Path, family: Family) -> list[str]:
    return [str(python), "-m", "fp4graph.integration.checkpoint", str(out), "--family", family.name]


def describe(args: argparse.Namespace, layout: Layout, install: plan.InstallPlan, cells: Sequence[Cell]) -> list[str]:
    """The plan as lines of text (what --dry-run prints)."""
    version = install.pins.sglang_version
    families = list(dict.fromkeys(c.family for c in cells))
    lines = [
        f"stack: {args.stack} (pins from {install.pins.source})",
        "pins: " + " ".join(p.requirement for p in install.pins.pins),
        f"venv: {install.venv}",
        "device check: nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader "
        f"(needs {args.tp} SM120 GPU(s); else SKIPPED, exit 0)",
    ]
    lines += ["install: " + plan.render(c) for c in install.commands()]
    newer = [f"{f.name} (>= {f.min_transformers})" for f in families if f.min_transformers]
    other = install.with_overrides(NEWER_TRANSFORMERS)
    if newer:
        lines.append(
            f"transformers: {', '.join(newer)}; where the venv's is older, venv {other.venv}:"
        )
        lines += ["  install: " + plan.render(c) for c in other.commands()]
    if args.model_path is None:
        for family in families:
            cmd = checkpoint_command(install.python, layout.checkpoint(family), family)
            lines.append(f"checkpoint {family.name}: PYTHONPATH={SRC} {plan.render(cmd)}")
    lines.append(f"matrix: {len(cells)} cells x piecewise off/on")
    if not args.family and args.model_path is None:
        for family in selection(args, version).left_out():
            lines.append(f"left out: {family.name} (sglang {version} has no model class for "
                         f"{family.architecture}, new in {family.min_sglang})")
    base_url = "http://127.0.0.1:PORT"
    for cell in cells:
        venv = ""
        if cell.family.min_transformers:
            venv = f"; {other.venv.name} where the venv's transformers predates {cell.family.min_transformers}"
        lines.append(f"cell {cell.id} ({cell.family.architecture}{venv}):")
        for mode in (flags.Piecewise.OFF, flags.Piecewise.ON):
            cmd = flags.server_command(
                install.python, sglang_version=version, model_path=_model_path(args, layout, cell.family),
                cell=cell, mode=mode, tp=args.tp, port=0, extra=args.server_arg,
            )
            lines.append(f"  server piecewise {mode.value}: " + plan.render(cmd).replace("--port 0", "--port PORT"))
            lines.append(f"    generate: POST {base_url}/generate ({len(server.PROMPTS)} prompts, greedy)")
            if benched(cell, args):
                for level in args.concurrency:
                    cmd = flags.bench_command(
                        install.python, base_url=base_url, model_path=_model_path(args, layout, cell.family),
                        settings=_bench_settings(args, level), output_file=layout.bench_file(cell, mode, level),
                    )
                    lines.append(f"    bench c={level}: " + plan.render(cmd))
    if args.sglang_checkout:
        lines.append(f"upstream test: {install.python} {args.sglang_checkout / sglang_suite.TEST_FILE}")
    lines.append(f"report: {layout.output / 'report.md'} and report.json")
    return lines


def _run_logged(command: Sequence[str], log: pathlib.Path, env: dict[str, str] | None = None) -> None:
    """Run ``command`` with its output appended to ``log``; raise if it fails."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as f:
        f.write(("$ " + plan.render(command) + "\n").encode())
        f.flush()
        code = subprocess.run(
            list(command), stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        ).returncode
    if code != 0:
        raise Fp4graphError(f"{plan.render(command)} exited {code}; see {log}")


def _output(command: Sequence[str], log: pathlib.Path) -> str:
    """The stdout of ``command`` (logged to ``log``); raise if it fails."""
    result = subprocess.run(list(command), capture_output=True, text=True)
    with log.open("a") as f:
        f.write("$ " + plan.render(command) + "\n" + result.stdout + result.stderr)
    if result.returncode != 0:
        raise Fp4graphError(f"{plan.render(command)} exited {result.returncode}; see {log}")
    return result.stdout.strip()


def _skip(layout: Layout, context: dict[str, Any], reason: str) -> int:
    print(f"{SKIPPED} {reason}")
    write_report(layout.output, [], {**context, "status": "skipped", "reason": reason})
    return 0


def _install(install: plan.InstallPlan, log: pathlib.Path) -> None:
    for command in install.commands():
        print(f"$ {plan.render(command)}", flush=True)
        _run_logged(command, log)


# The generator's identity: a checkpoint is regenerated when either module changes.
_GENERATOR_SOURCES = ("checkpoint.py", "families.py")
STAMP = "fp4graph-checkpoint.json"


def _generator_digest() -> str:
    here = pathlib.Path(__file__).parent
    digest = hashlib.sha256()
    for name in _GENERATOR_SOURCES:
        digest.update((here / name).read_bytes())
    return digest.hexdigest()


def ensure_checkpoint(python: pathlib.Path, out: pathlib.Path, family: Family, log: pathlib.Path) -> bool:
    """Write the family's checkpoint unless ``out`` holds this generator's; True if written."""
    stamp = {"family": family.name, "size": Size.SERVE.value, "generator": _generator_digest()}
    try:
        if json.loads((out / STAMP).read_text()) == stamp:
            return False
    except (OSError, json.JSONDecodeError):
        pass
    shutil.rmtree(out, ignore_errors=True)
    _run_logged(checkpoint_command(python, out, family), log, env={"PYTHONPATH": str(SRC)})
    (out / STAMP).write_text(json.dumps(stamp) + "\n")
    return True


@dataclasses.dataclass(frozen=True, kw_only=True)
class CellEnv:
    python: pathlib.Path
    sglang_version: str
    model: pathlib.Path


def run_cell(cell: Cell, env: CellEnv, args: argparse.Namespace, layout: Layout) -> CellResult:
    """Start ``cell`` with piecewise off, then on; generate, benchmark, compare."""
    result = CellResult(cell=cell, architecture=cell.family.architecture)
    generations: dict[flags.Piecewise, list[server.Completion]] = {}
    results: dict[tuple[flags.Piecewise, int], benchmark.BenchMetrics] = {}
    logs = layout.cell_logs(cell)
    for mode in (flags.Piecewise.OFF, flags.Piecewise.ON):
        port = server.free_port()
        base_url = f"http://127.0.0.1:{port}"
        command = flags.server_command(
            env.python, sglang_version=env.sglang_version, model_path=env.model, cell=cell, mode=mode,
            tp=args.tp, port=port, extra=args.server_arg,
        )
        log = logs / f"server-{mode.value}.log"
        run = result.runs[mode.value] = Run(command=command, log=str(log))
        print(f"{cell.id} piecewise {mode.value}: $ {plan.render(command)}", flush=True)
        try:
            with server.launched(command, base_url=base_url, log=log, timeout=args.server_timeout) as running:
                run.startup_s = running.startup_s
                print(f"{cell.id} piecewise {mode.value}: healthy after {running.startup_s:.0f} s", flush=True)
                generations[mode] = server.generate(base_url, server.PROMPTS)
                run.captured = flags.PIECEWISE_CAPTURED_MARKER in running.log_text()
                if benched(cell, args):
                    for level in args.concurrency:
                        out = layout.bench_file(cell, mode, level)
                        out.parent.mkdir(parents=True, exist_ok=True)
                        out.unlink(missing_ok=True)
                        cmd = flags.bench_command(
                            env.python, base_url=base_url, model_path=env.model,
                            settings=_bench_settings(args, level), output_file=out,
                        )
                        _run_logged(cmd, logs / f"bench-{mode.value}-c{level}.log")
                        results[(mode, level)] = benchmark.parse_jsonl(out)
                        print(f"{cell.id} piecewise {mode.value} c={level}: "
                              f"{results[(mode, level)].output_throughput:.1f} output tok/s", flush=True)
        except Fp4graphError as exc:
            run.error = str(exc)
            result.problems.append(f"piecewise {mode.value}: {exc}")
            continue
        if mode is flags.Piecewise.ON and not run.captured:
            result.problems.append(
                f"piecewise on: the server log lacks {flags.PIECEWISE_CAPTURED_MARKER!r} "
                "(sglang switched piecewise CUDA graphs off?)"
            )
        if mode is flags.Piecewise.OFF and run.captured:
            result.problems.append("piecewise off: the server still captured piecewise CUDA graphs")
    on, off = generations.get(flags.Piecewise.ON), generations.get(flags.Piecewise.OFF)
    if on is not None and off is not None:
        result.compared = len(on)
        result.mismatches = server.compare(on, off)
        for m in result.mismatches:
            result.problems.append(
                f"greedy output differs for {m.prompt!r} (first token {m.first_divergent_token}): "
                f"on {m.on!r} vs off {m.off!r}"
            )
    result.bench = [
        benchmark.Row(
            concurrency=level,
            on=results.get((flags.Piecewise.ON, level)),
            off=results.get((flags.Piecewise.OFF, level)),
        )
        for level in (args.concurrency if benched(cell, args) else ())
    ]
    return result


def _environments(
    install: plan.InstallPlan, families: Sequence[Family], logs: pathlib.Path
) -> tuple[dict[str, plan.InstallPlan], dict[str, str]]:
    """The venv of each family (the stack's, or one with a newer transformers) and the
    transformers version of each venv used."""
    installed = _output([str(install.python), "-c", plan.TRANSFORMERS_PROBE], logs / "install.log")
    envs = {f.name: install for f in families}
    versions = {str(install.venv): installed}
    newer = [f for f in families if f.needs_newer_transformers(installed)]
    if newer:
        other = install.with_overrides(NEWER_TRANSFORMERS)
        print(f"transformers {installed} predates {', '.join(f.name for f in newer)}: venv {other.venv}", flush=True)
        _install(other, logs / "install.log")
        versions[str(other.venv)] = _output([str(other.python), "-c", plan.TRANSFORMERS_PROBE], logs / "install.log")
        envs.update({f.name: other for f in newer})
    return envs, versions


def run(args: argparse.Namespace) -> int:
    layout = _layout(args)
    install = plan.make_plan(
        repo=layout.repo, stack=args.stack, work_dir=layout.work_dir, base_python=args.python,
        wheels_dir=args.wheels_dir, index_url=args.index_url,
    )
    cells = selected_cells(args, install.pins.sglang_version)
    if args.dry_run:
        print("\n".join(describe(args, layout, install, cells)))
        return 0
    version = install.pins.sglang_version
    families = list(dict.fromkeys(c.family for c in cells))
    context: dict[str, Any] = {
        "stack": args.stack,
        "pins": [p.requirement for p in install.pins.pins],
        "tp": args.tp,
        "model": str(args.model_path) if args.model_path else "tiny generated NVFP4 checkpoints",
        "families": [f.name for f in families],
        "cells": len(cells),
    }
    reason = device.probe_nvidia_smi().skip_reason(args.tp)
    if args.device_check:
        print(f"{SKIPPED} {reason}" if reason else f"integration: {args.tp} SM120 GPU(s) found")
        return 0
    if reason:
        return _skip(layout, context, reason)
    missing = install.missing_wheels()
    if missing:
        where = install.find_links
        raise ConfigError(
            f"{where} has no wheel for {', '.join(missing)}: build them with "
            f"`nox -s wheels -- --stack {args.stack}` (or pass --index-url of an index serving them)"
        )

    logs = layout.logs
    _install(install, logs / "install.log")
    reason = device.probe_torch(install.python).skip_reason(args.tp)
    if reason:
        return _skip(layout, context, reason)
    envs, versions = _environments(install, families, logs)
    context["transformers"] = versions

    for family in families:
        if args.model_path is None:
            python = envs[family.name].python
            if ensure_checkpoint(python, layout.checkpoint(family), family, logs / "checkpoint.log"):
                print(f"checkpoint {family.name}: {layout.checkpoint(family)}", flush=True)

    results: list[CellResult] = []
    for cell in cells:
        env = CellEnv(
            python=envs[cell.family.name].python, sglang_version=version,
            model=_model_path(args, layout, cell.family),
        )
        result = run_cell(cell, env, args, layout)
        print(f"{cell.id}: {'passed' if result.passed else 'FAILED'}", flush=True)
        results.append(result)

    problems: list[str] = []
    if args.sglang_checkout:
        cmd = sglang_suite.test_command(install.python, args.sglang_checkout, version)
        try:
            _run_logged(cmd, logs / "upstream-test.log")
        except Fp4graphError as exc:
            problems.append(f"upstream piecewise test failed: {exc}")
    failed = [r for r in results if not r.passed]
    context.update(status="failed" if failed or problems else "passed", problems=problems)
    md, js = write_report(layout.output, results, context)
    print(f"report: {md} {js}")
    for p in problems:
        print(f"FAILED: {p}")
    for r in failed:
        for p in r.problems:
            print(f"FAILED: {r.cell.id}: {p}")
    return 1 if failed or problems else 0
