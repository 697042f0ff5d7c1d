"""One regression gate: the projects of a stack to run, their bundles, a report each.

:mod:`.workflow` calls these in order: :func:`plan` chooses the projects (those with a
selection and a source pin; with no GPU, none whose tests need one), :func:`prepare_stack`
makes their bundles (or :func:`open_bundles` opens packed ones, checked against the pins of
today), :func:`check_requirements` refuses an interpreter that lacks what their tests import,
and :func:`gate_bundle` runs one and writes its report.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ...model import config
from ...model.errors import SuiteError
from ...model.files import write_atomic
from ...model.stacks import load
from . import report
from .bundle import Bundle, check_bundle_pin, open_bundle
from .interpreter import unmet
from .prepare import prepare_bundle
from .run import RunOptions, probe_device, run_bundle
from .selection import SELECTIONS


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    stack: str
    projects: tuple[str, ...]
    skipped: tuple[str, ...] = ()  # one line per project left out: "PROJECT: why"


def cuda_available(python: str = sys.executable) -> bool:
    """Whether torch in ``python`` sees a CUDA GPU (a child process: fp4graph imports no torch)."""
    return bool(probe_device(python).get("cuda_available"))


def plan(
    settings: config.Settings, stack: str, asked: Sequence[str] = (), *, cuda: bool | None = None
) -> Plan:
    """The projects of ``stack`` to run: ``asked``, else every one with a selection and a pin.

    ``cuda=False`` leaves out the projects whose tests need a GPU; ``None`` keeps them (for
    ``--pack`` and ``--requirements``, which run no test).
    """
    catalog = load(settings.stacks_file)
    pinned = {a.project: a.source for a in catalog.stack_artifacts(catalog.stack(stack))}
    skipped: list[str] = []
    if asked:
        projects = list(asked)
    else:
        skipped += [f"{p}: patches/stacks.toml pins no source (repo, tag, commit) for it"
                    for p in SELECTIONS if p in pinned and not pinned[p]]
        projects = [p for p in SELECTIONS if pinned.get(p)]
        if not projects:
            raise SuiteError(f"stack {stack}: no artifact with a test selection and a source pin")
    if cuda is False:
        gpu_only = [p for p in projects if SELECTIONS[p].needs_cuda]
        skipped += [f"{p}: its tests need a CUDA GPU and torch sees none" for p in gpu_only]
        projects = [p for p in projects if p not in gpu_only]
    return Plan(stack=stack, projects=tuple(projects), skipped=tuple(skipped))


def prepare_stack(
    settings: config.Settings,
    planned: Plan,
    work: pathlib.Path,
    *,
    repos: Mapping[str, pathlib.Path] | None = None,
    patched: pathlib.Path | None = None,
) -> list[Bundle]:
    """The bundles of the planned projects, under ``work`` (``repos``: local clones)."""
    if patched and len(planned.projects) != 1:
        raise SuiteError("--patched WHEEL needs exactly one --project")
    repos = repos or {}
    return [
        prepare_bundle(settings, planned.stack, project, work / f"{project}-{planned.stack}",
                repo=repos.get(project), patched=patched)
        for project in planned.projects
    ]


def open_bundles(settings: config.Settings, paths: Sequence[pathlib.Path], work: pathlib.Path) -> list[Bundle]:
    """Prepared bundles (directories or ``.tar.xz``), each refused if its pin has moved."""
    catalog = load(settings.stacks_file)
    bundles = [open_bundle(path, work / f"bundle-{i}") for i, path in enumerate(paths)]
    for bundle in bundles:
        check_bundle_pin(bundle, catalog)
    return bundles


def check_requirements(bundles: Sequence[Bundle], python: str) -> None:
    """Refuse to run when ``python`` lacks a requirement of the bundles' tests, naming each."""
    problems: list[str] = []
    install: dict[str, None] = {}
    for bundle in bundles:
        missing = unmet(python, bundle.manifest["requirements"])
        if missing:
            problems.append(f"{bundle.name} ({bundle.path}): "
                            + ", ".join(f"{req} ({has})" for req, has in missing))
            install.update(dict.fromkeys(req for req, _ in missing))
    if problems:
        quoted = " ".join(f"'{r}'" for r in install)
        raise SuiteError(
            f"the test interpreter {python} lacks what upstream's tests import; nothing was run:\n  "
            + "\n  ".join(problems)
            + f"\ninstall them ({python} -m pip install {quoted}), or run `nox -s suites`, "
            "which installs them"
        )


def gate_bundle(
    bundle: Bundle, work: pathlib.Path, options: RunOptions, out: pathlib.Path, *, command: str
) -> dict[str, Any]:
    """Run ``bundle``, write ``out/<stack>-<project>-<version>.{json,md}``; the report."""
    result = run_bundle(bundle, work / f"run-{bundle.name}", options)
    result["command"] = command
    stem = f"{bundle.manifest['stack']}-{bundle.name}"
    write_atomic(out / f"{stem}.json", json.dumps(result, indent=2) + "\n")
    write_atomic(out / f"{stem}.md", report.markdown(result))
    return result
