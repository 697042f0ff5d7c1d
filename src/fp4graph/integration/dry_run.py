"""``--dry-run``: every command a run would make, as lines of text; nothing is created."""

from __future__ import annotations

from ..install import stack as installing
from ..model.families import NEWER_TRANSFORMERS
from . import flags, plan, server, sglang_suite
from .matrix import Cell
from .options import SRC, IntegrationOptions, Resolved, checkpoint_command, resolve


def describe(options: IntegrationOptions) -> list[str]:
    """The whole plan of a run with ``options``."""
    resolved = resolve(options)
    install, layout = resolved.install, resolved.layout
    lines = [
        f"stack: {options.stack} (pins from {install.pins.source})",
        "pins: " + " ".join(p.requirement for p in install.pins.pins),
        f"venv: {install.venv}",
        "device check: nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader "
        f"(needs {options.tp} SM120 GPU(s); else SKIPPED, exit 0)",
    ]
    readme = installing.install_command(
        [str(install.python), "-m", "pip"], index_url=install.index_url or "http://127.0.0.1:PORT/simple/",
        extra_index_urls=[installing.PYPI], lock=f"patches/locks/{options.stack}.txt",
        pins=[p.requirement for p in install.pins.pins])
    lines += [f"install: {install.base_python} -m venv {install.venv}", "install: " + plan.render(readme),
              "install: then pip check and the import smoke (python -m fp4graph install's steps)"]
    newer = [f"{f.name} (>= {f.min_transformers})" for f in resolved.families if f.min_transformers]
    other = install.with_overrides(NEWER_TRANSFORMERS)
    if newer:
        lines.append(f"transformers: {', '.join(newer)}; where the venv's is older, venv {other.venv}:")
        lines += ["  install: " + plan.render(c) for c in other.commands()]
    if options.model_path is None:
        for family in resolved.families:
            cmd = checkpoint_command(install.python, layout.checkpoint(family), family)
            lines.append(f"checkpoint {family.name}: PYTHONPATH={SRC} {plan.render(cmd)}")
    lines.append(f"matrix: {len(resolved.cells)} cells x piecewise off/on")
    if not options.families and options.model_path is None:
        version = install.pins.sglang_version
        for family in options.selection(version).left_out():
            lines.append(f"left out: {family.name} (sglang {version} has no model class for "
                         f"{family.architecture}, new in {family.min_sglang})")
    for cell in resolved.cells:
        lines += _cell_lines(resolved, cell, other.venv.name)
    if options.sglang_checkout:
        lines.append(f"upstream test: {install.python} {options.sglang_checkout / sglang_suite.TEST_FILE}")
    lines.append(f"report: {layout.output / 'report.md'} and report.json")
    return lines


def _cell_lines(resolved: Resolved, cell: Cell, newer_venv: str) -> list[str]:
    options, install = resolved.options, resolved.install
    model = resolved.layout.model_path(options, cell.family)
    base_url = "http://127.0.0.1:PORT"
    venv = ""
    if cell.family.min_transformers:
        venv = f"; {newer_venv} where the venv's transformers predates {cell.family.min_transformers}"
    lines = [f"cell {cell.id} ({cell.family.architecture}{venv}):"]
    for mode in (flags.Piecewise.OFF, flags.Piecewise.ON):
        cmd = flags.server_command(
            install.python, sglang_version=install.pins.sglang_version, model_path=model,
            cell=cell, mode=mode, tp=options.tp, port=0, extra=options.server_args,
        )
        lines.append(f"  server piecewise {mode.value}: " + plan.render(cmd).replace("--port 0", "--port PORT"))
        lines.append(f"    generate: POST {base_url}/generate ({len(server.PROMPTS)} prompts, greedy)")
        for level in options.bench_levels(cell):
            cmd = flags.bench_command(
                install.python, base_url=base_url, model_path=model,
                settings=options.bench_settings(level),
                output_file=resolved.layout.bench_file(cell, mode, level),
            )
            lines.append(f"    bench c={level}: " + plan.render(cmd))
    return lines
