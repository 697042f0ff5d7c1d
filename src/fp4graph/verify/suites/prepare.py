"""Make a bundle where GitHub and PyPI are reachable: upstream's files, the two installs.

:func:`prepare_bundle` gets upstream's test files at the commit ``source`` pins in
patches/stacks.toml (from GitHub or a local clone; a tag that names another commit is
refused), chooses the selection's files there, installs the patched and the pristine wheels
(with the stack's companions, e.g. sglang's flashinfer) each in a directory of its own, and
writes ``bundle.json`` (with what the test interpreter needs besides: checked before a run).
:func:`requirements` is that list for an install, with the stack's torch pin.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from collections.abc import Sequence

from packaging.requirements import Requirement
from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename

from ...model import config
from ...model.errors import SuiteError
from ...model.files import atomic_directory, sha256_of, write_atomic
from ...model.log import log
from ...model.series import load_series
from ...model.stacks import Artifact, ArtifactFile, Catalog, load
from ...wheels.build import patched_wheel
from ...wheels.fetch import fetch
from .bundle import BUNDLE_FORMAT, VARIANTS, Bundle, install, jit_difference
from .interpreter import bundle_requirements, requires_dist
from .selection import SELECTIONS, Selection, select, support_paths, touched_modules
from .source import export, fetch_pin, read_texts, tree_paths, verify_pin


def wheel_for_python(artifact: Artifact) -> ArtifactFile:
    """The pinned wheel this interpreter installs (sglang >= 0.5.11 pins one per CPython)."""
    if len(artifact.files) == 1:
        return artifact.files[0]
    supported = set(sys_tags())
    for pinned in artifact.files:
        if supported & set(parse_wheel_filename(pinned.filename)[3]):
            return pinned
    raise SuiteError(
        f"{artifact.key}: none of its pinned wheels installs on this Python "
        f"({sys.version.split()[0]}): " + ", ".join(f.filename for f in artifact.files)
    )


def stack_artifact(catalog: Catalog, stack: str, project: str) -> Artifact:
    for artifact in catalog.stack_artifacts(catalog.stack(stack)):
        if artifact.project == project:
            return artifact
    raise SuiteError(f"stack {stack} has no {project} artifact")


def _wheel_pair(settings: config.Settings, artifact: Artifact) -> dict[str, pathlib.Path]:
    pinned = wheel_for_python(artifact)
    pair = {"pristine": fetch(settings, artifact.project, pinned)}
    series = load_series(settings.patches_dir, artifact.project, artifact.version)
    # A companion without a series is installed as upstream publishes it, in both variants.
    if series is None:
        pair["patched"] = pair["pristine"]
    else:
        pair["patched"] = patched_wheel(settings, artifact, pinned)
    return pair


def prepare_bundle(
    settings: config.Settings,
    stack: str,
    project: str,
    dest: pathlib.Path,
    *,
    repo: pathlib.Path | None = None,
    url: str | None = None,
    patched: pathlib.Path | None = None,
    python: str = sys.executable,
    selection: Selection | None = None,
) -> Bundle:
    """Make the bundle of ``stack``'s ``project`` at ``dest`` (which must not exist)."""
    catalog = load(settings.stacks_file)
    selection = selection or SELECTIONS.get(project)
    if selection is None:
        raise SuiteError(f"no test selection for {project}; known: {', '.join(SELECTIONS)}")
    artifact = stack_artifact(catalog, stack, project)
    where = f"stack {stack}: {artifact.project} {artifact.version}"
    pin = artifact.source
    if pin is None:
        raise SuiteError(
            f"{where}: patches/stacks.toml pins no source; add "
            f'source = {{ repo = "OWNER/NAME", tag = "v{artifact.version}", commit = "<40 hex>" }} '
            f"to the artifact (the commit: git rev-parse v{artifact.version}^{{commit}})"
        )
    git_repo = repo if repo is not None else fetch_pin(settings, pin, url)
    origin = verify_pin(git_repo, pin, where)
    if repo is None:
        origin = f"{url or pin.url} (fetched): {origin}"
    log(f"{where}: upstream files from {origin}")

    tree = tree_paths(git_repo, pin.commit)
    modules = touched_modules(settings.patches_dir, artifact) if selection.series_tests else []
    chosen, absent = select(selection, tree, lambda paths: read_texts(git_repo, pin.commit, paths), modules)

    if dest.exists():
        raise SuiteError(f"{dest}: already exists")
    with atomic_directory(dest, replace=False) as tmp:
        export(git_repo, pin.commit, support_paths(selection, tree, chosen), tmp / "upstream")
        (tmp / "upstream").mkdir(exist_ok=True)
        wheels: dict[str, list[pathlib.Path]] = {v: [] for v in VARIANTS}
        for name in (project, *selection.companions):
            pair = _wheel_pair(settings, stack_artifact(catalog, stack, name))
            if name == project and patched is not None:
                pair["patched"] = patched
            for variant in VARIANTS:
                wheels[variant].append(pair[variant])
        for variant in VARIANTS:
            install(python, wheels[variant], tmp / f"site-{variant}")
        manifest = {
            "format": BUNDLE_FORMAT,
            "stack": stack,
            "project": artifact.project,
            "version": artifact.version,
            "source": {**dataclasses.asdict(pin), "origin": origin},
            "series_modules": modules,
            "files": [s.to_json() for s in chosen],
            "absent": absent,
            "wheels": {
                v: [{"filename": w.name, "sha256": sha256_of(w)} for w in wheels[v]] for v in VARIANTS
            },
            "jit_env": selection.jit_env,
            "needs_cuda": selection.needs_cuda,
            "pytest_args": list(selection.pytest_args),
            "requirements": bundle_requirements(selection, wheels["pristine"][0], wheels["pristine"][1:]),
            "jit_shareable": jit_difference(tmp / "site-patched", tmp / "site-pristine") is None
            if selection.jit_env else False,
        }
        write_atomic(tmp / "bundle.json", json.dumps(manifest, indent=2) + "\n")
    return Bundle(dest, manifest)


def requirements(settings: config.Settings, stack: str, projects: Sequence[str],
                 torch: str | None = None) -> list[str]:
    """What the test interpreter needs besides the wheels under test (for `nox -s suites`)."""
    catalog = load(settings.stacks_file)
    torch_pin = torch or catalog.stack(stack).torch
    reqs: list[str] = [f"torch=={torch_pin}" if torch_pin else "torch"]
    for project in projects:
        selection = SELECTIONS[project]
        reqs += selection.requirements
        names = [project] if selection.wheel_requirements else []
        for name in [*names, *selection.companions]:
            wheel = fetch(settings, name, wheel_for_python(stack_artifact(catalog, stack, name)))
            reqs += requires_dist(wheel)
    out: list[str] = []
    for req in reqs:
        if Requirement(req).name != "torch" or req == reqs[0]:
            if req not in out:
                out.append(req)
    return out
