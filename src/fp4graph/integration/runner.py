"""The integration run: the matrix under sglang on SM120 GPUs, from the install to the report.

Steps: check for SM120 GPUs (nvidia-smi), install the stack as users do and check it
imports (:func:`fp4graph.install.stack.install_stack`, what ``nox -s install`` runs: a venv,
the stack's exact ``==X+fp4graph.N`` pins from our index plus PyPI with the stack's lock,
``pip check``, the import smoke), skip here when there are no SM120 GPUs (on a CPU the
install and import steps still run), confirm the GPUs from torch in that venv, give families whose model type the pinned transformers lacks a second
venv with a newer transformers, write one tiny NVFP4 checkpoint per family (unless a
``model_path`` is given), then for every matrix cell (:mod:`.matrix`) and piecewise off and
on: launch sglang, greedy-generate the fixed prompts, run bench_serving at each concurrency
(benchmarked cells); finally compare the generations and write the report (:mod:`.report`).

Progress goes to :func:`fp4graph.model.log.progress` (a status line per step); the result is
an :class:`Outcome`: passed, failed (a crash, a different greedy output, piecewise not
active) or skipped (no SM120 GPU; the report's ``status`` says so too).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any, Literal

from ..install import stack as installing
from ..model import families as family_table
from ..model.config import Settings
from ..model.errors import ConfigError, Fp4graphError
from ..model.families import NEWER_TRANSFORMERS, Family, Size
from ..model.log import progress
from . import benchmark, device, flags, plan, server, sglang_suite
from .matrix import Cell
from .options import SRC, IntegrationOptions, Layout, Resolved, checkpoint_command, resolve
from .report import CellResult, Run
from .report import write as write_report


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DeviceCheck:
    """Whether this machine has the SM120 GPUs a run needs (asked of nvidia-smi)."""

    tp: int
    sm120_gpus: int
    skip_reason: str | None  # None: the run can go ahead

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    status: Literal["passed", "failed", "skipped"]
    reason: str | None = None  # why it was skipped
    report: tuple[pathlib.Path, pathlib.Path] | None = None  # report.md, report.json
    failures: tuple[str, ...] = ()  # one line per problem, "<cell id>: <problem>" for a cell's

    @property
    def exit_code(self) -> int:
        return 1 if self.status == "failed" else 0


def device_check(options: IntegrationOptions) -> DeviceCheck:
    """The GPUs a run with ``options`` needs, asked of nvidia-smi (after the options are
    checked against the checkout, as a run checks them)."""
    resolve(options)
    report = device.probe_nvidia_smi()
    return DeviceCheck(tp=options.tp, sm120_gpus=len(report.sm120), skip_reason=report.skip_reason(options.tp))


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


def install_as_users_do(options: IntegrationOptions, layout: Layout, install: plan.InstallPlan) -> None:
    """``nox -s install``'s steps into the run's venv; raise naming each failed step."""
    chosen = installing.options_for(
        Settings.from_env(layout.repo), options.stack, venv=install.venv, base_python=install.base_python,
        pins=[p.requirement for p in install.pins.pins],
        wheels_dir=install.find_links, index_url=install.index_url, extra_index_urls=(installing.PYPI,),
        installer=options.installer, log_file=layout.logs / "install.log",
        extra_checks=[installing.ExtraCheck(name=name, argv=tuple(shlex.split(cmd))) for name, cmd in options.checks],
    )
    layout.logs.mkdir(parents=True, exist_ok=True)
    report = installing.install_stack(chosen)
    for line in installing.summary(report):
        progress(line)
    if not report.ok:
        failed = "; ".join(f"{s.name}: {s.detail}" for s in report.failed)
        raise installing.InstallError(f"stack {options.stack} does not install and import as users install it: "
                                      f"{failed}; see {layout.logs / 'install.log'}")


def _install(install: plan.InstallPlan, log: pathlib.Path) -> None:
    for command in install.commands():
        progress(f"$ {plan.render(command)}")
        _run_logged(command, log)


# The generator's identity: a checkpoint is regenerated when its code or the families change.
STAMP = "fp4graph-checkpoint.json"


def _generator_digest() -> str:
    here = pathlib.Path(__file__).parent
    digest = hashlib.sha256()
    for path in [*sorted((here / "checkpoint").glob("*.py")), pathlib.Path(family_table.__file__)]:
        digest.update(path.read_bytes())
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


def _serve(cell: Cell, mode: flags.Piecewise, env: CellEnv, options: IntegrationOptions, layout: Layout,
           run: Run, generations: dict[flags.Piecewise, list[server.Completion]],
           results: dict[tuple[flags.Piecewise, int], benchmark.BenchMetrics]) -> None:
    """One server start of ``cell``: health, greedy generations, bench_serving (benchmarked
    cells); what it got is kept in ``run``, ``generations`` and ``results`` when a later step fails."""
    port = server.free_port()
    base_url = f"http://127.0.0.1:{port}"
    run.command = flags.server_command(
        env.python, sglang_version=env.sglang_version, model_path=env.model, cell=cell, mode=mode,
        tp=options.tp, port=port, extra=options.server_args,
    )
    progress(f"{cell.id} piecewise {mode.value}: $ {plan.render(run.command)}")
    with server.launched(run.command, base_url=base_url, log=pathlib.Path(run.log),
                         timeout=options.server_timeout) as running:
        run.startup_s = running.startup_s
        progress(f"{cell.id} piecewise {mode.value}: healthy after {running.startup_s:.0f} s")
        generations[mode] = server.generate(base_url, server.PROMPTS)
        run.captured = flags.PIECEWISE_CAPTURED_MARKER in running.log_text()
        for level in options.bench_levels(cell):
            out = layout.bench_file(cell, mode, level)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.unlink(missing_ok=True)
            cmd = flags.bench_command(env.python, base_url=base_url, model_path=env.model,
                                      settings=options.bench_settings(level), output_file=out)
            _run_logged(cmd, layout.cell_logs(cell) / f"bench-{mode.value}-c{level}.log")
            results[(mode, level)] = metrics = benchmark.parse_jsonl(out)
            progress(f"{cell.id} piecewise {mode.value} c={level}: {metrics.output_throughput:.1f} output tok/s")


def run_cell(cell: Cell, env: CellEnv, options: IntegrationOptions, layout: Layout) -> CellResult:
    """Start ``cell`` with piecewise off, then on; generate, benchmark, compare."""
    result = CellResult(cell=cell, architecture=cell.family.architecture)
    generations: dict[flags.Piecewise, list[server.Completion]] = {}
    results: dict[tuple[flags.Piecewise, int], benchmark.BenchMetrics] = {}
    for mode in (flags.Piecewise.OFF, flags.Piecewise.ON):
        log = layout.cell_logs(cell) / f"server-{mode.value}.log"
        run = result.runs[mode.value] = Run(command=[], log=str(log))
        try:
            _serve(cell, mode, env, options, layout, run, generations, results)
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
        benchmark.Row(concurrency=level, on=results.get((flags.Piecewise.ON, level)),
                      off=results.get((flags.Piecewise.OFF, level)))
        for level in options.bench_levels(cell)
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
        progress(f"transformers {installed} predates {', '.join(f.name for f in newer)}: venv {other.venv}")
        _install(other, logs / "install.log")
        versions[str(other.venv)] = _output([str(other.python), "-c", plan.TRANSFORMERS_PROBE], logs / "install.log")
        envs.update({f.name: other for f in newer})
    return envs, versions


def _context(resolved: Resolved) -> dict[str, Any]:
    """The report's header: what was asked for."""
    options = resolved.options
    return {
        "stack": options.stack,
        "pins": [p.requirement for p in resolved.install.pins.pins],
        "tp": options.tp,
        "model": str(options.model_path) if options.model_path else "tiny generated NVFP4 checkpoints",
        "families": [f.name for f in resolved.families],
        "cells": len(resolved.cells),
    }


def _skip(layout: Layout, context: dict[str, Any], reason: str) -> Outcome:
    write_report(layout.output, [], {**context, "status": "skipped", "reason": reason})
    return Outcome(status="skipped", reason=reason)


def run(options: IntegrationOptions) -> Outcome:
    """The whole run (see the module docstring); raises an Fp4graphError when it cannot start
    (a bad stack, the patched wheels missing, an install that fails)."""
    resolved = resolve(options)
    layout, install = resolved.layout, resolved.install
    context = _context(resolved)
    reason = device.probe_nvidia_smi().skip_reason(options.tp)
    if missing := install.missing_wheels():
        raise ConfigError(
            f"{install.find_links} has no wheel for {', '.join(missing)}: build them with "
            f"`nox -s wheels -- --stack {options.stack}` (or pass --index-url of an index serving them)"
        )
    install_as_users_do(options, layout, install)  # on a CPU too: the install and import steps
    if reason:
        return _skip(layout, context, f"{reason} (installed and imported: {layout.logs / 'install.log'})")
    reason = device.probe_torch(install.python).skip_reason(options.tp)
    if reason:
        return _skip(layout, context, reason)
    envs, context["transformers"] = _environments(install, resolved.families, layout.logs)
    if options.model_path is None:
        for family in resolved.families:
            out = layout.checkpoint(family)
            if ensure_checkpoint(envs[family.name].python, out, family, layout.logs / "checkpoint.log"):
                progress(f"checkpoint {family.name}: {out}")
    results: list[CellResult] = []
    for cell in resolved.cells:
        env = CellEnv(python=envs[cell.family.name].python, sglang_version=install.pins.sglang_version,
                      model=layout.model_path(options, cell.family))
        results.append(run_cell(cell, env, options, layout))
        progress(f"{cell.id}: {'passed' if results[-1].passed else 'FAILED'}")
    problems = _upstream_test(options, install, layout)
    failures = (*problems, *(f"{r.cell.id}: {p}" for r in results if not r.passed for p in r.problems))
    failed = bool(problems) or any(not r.passed for r in results)
    context.update(status="failed" if failed else "passed", problems=problems)
    report = write_report(layout.output, results, context)
    return Outcome(status="failed" if failed else "passed", report=report, failures=failures)


def _upstream_test(options: IntegrationOptions, install: plan.InstallPlan, layout: Layout) -> list[str]:
    """sglang's own piecewise test file, from a checkout at the pinned tag (when given)."""
    if not options.sglang_checkout:
        return []
    cmd = sglang_suite.test_command(install.python, options.sglang_checkout, install.pins.sglang_version)
    try:
        _run_logged(cmd, layout.logs / "upstream-test.log")
    except Fp4graphError as exc:
        return [f"upstream piecewise test failed: {exc}"]
    return []
