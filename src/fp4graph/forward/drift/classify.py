"""Each patch of a series against one release (:func:`classify_release`), and every series
against every release (:func:`drift`); see the package docstring for the statuses."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

from ...model import projects as registry
from ...model.config import Settings
from ...model.errors import FetchError
from ...model.log import log
from ...model.series import Patch, Series, load_series, nearest_series_version
from ...wheels.apply import FileDiff, split_diff
from .release_files import ReleaseFiles
from .releases import releases
from .upstream_fixes import detect_fixes, superseding

STATUSES = ("applies", "upstream", "superseded", "conflicts", "unchecked")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Cell:
    project: str
    version: str
    series_version: str
    patch: str
    topic: str
    status: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


def _git_apply(tree: pathlib.Path, diff: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tree.parent))
    return subprocess.run(
        ["git", "apply", "-p1", "--whitespace=nowarn", *extra, "-"],
        input=diff, cwd=tree, env=env, capture_output=True, text=True,
    )


def _why(stderr: str) -> str:
    lines = [ln.removeprefix("error: ") for ln in stderr.splitlines() if ln.startswith("error:")]
    return "; ".join(lines[:3]) or stderr.strip()[:300]


def classify_release(
    files: ReleaseFiles, series: Series, work: pathlib.Path
) -> list[Cell]:
    """Classify every patch of ``series`` against ``files`` (see the module docstring)."""
    release = files.release
    tree = work / "tree"
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    touched = {d.repo_path for p in series.patches for d in split_diff(p)}
    files.copy_to(tree, touched)
    fixes = detect_fixes(files, release.project)
    cells = []
    blocked: list[str] = []
    for patch in series.patches:
        diffs = split_diff(patch)
        kept: list[FileDiff] = [d for d in diffs if files.covers(d.repo_path)]
        skipped = [d.repo_path for d in diffs if d not in kept]
        note = f" ({', '.join(skipped)}: not in {release.filename}, not checked)" if skipped else ""

        def cell(status: str, detail: str, patch: Patch = patch, note: str = note) -> Cell:
            return Cell(project=release.project, version=release.version,
                        series_version=series.version, patch=patch.name, topic=patch.topic,
                        status=status, detail=detail + note)

        if not kept:
            cells.append(cell("unchecked", "touches no file the release's wheel holds"))
            continue
        diff = "".join(d.text for d in kept)
        if _git_apply(tree, diff, "-R", "--check").returncode == 0:
            cells.append(cell("upstream", "git apply -R --check succeeds: the release has it"))
            continue
        forward = _git_apply(tree, diff, "--check")
        if forward.returncode == 0:
            # Still applies: still wanted, whatever upstream did beside it.
            _git_apply(tree, diff)
            cells.append(cell("applies", "git apply --check succeeds"))
            continue
        covering, partial = superseding(fixes, patch)
        if covering:
            cells.append(cell("superseded", "; ".join(f.describe() for f in covering)))
            continue
        after = f" (after {', '.join(blocked)} did not apply)" if blocked else ""
        partly = "".join(f"; {f.describe()}" for f in partial)
        cells.append(cell("conflicts", _why(forward.stderr) + after + partly))
        blocked.append(patch.name[:4])
    return cells


def drift(
    settings: Settings,
    projects: Sequence[str] = registry.NAMES,
    *,
    refresh: bool = False,
    offline: bool = False,
    first: dict[str, str] | None = None,
    only: dict[str, Sequence[str]] | None = None,
) -> tuple[list[Cell], list[str]]:
    """Classify every series patch against every release; (cells, notes)."""
    cells: list[Cell] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fp4graph-drift-") as tmp:
        for project in projects:
            rels = releases(settings, project, refresh=refresh, offline=offline,
                            first=(first or {}).get(project))
            if only is not None and project in only:
                rels = [r for r in rels if r.version in only[project]]
            loaded: dict[str, Series] = {}
            for release in rels:
                chosen = nearest_series_version(settings.patches_dir, project, release.version)
                if chosen is None:
                    notes.append(f"{project}: no series in patches/{project}/; nothing to check")
                    break
                if chosen not in loaded:
                    series = load_series(settings.patches_dir, project, chosen)
                    assert series is not None
                    loaded[chosen] = series
                series = loaded[chosen]
                files = ReleaseFiles(settings, release)
                wanted = {d.repo_path for p in series.patches for d in split_diff(p)}
                wanted |= {m for f in registry.get(project).upstream_fixes for m in f.members}
                if offline and not wanted <= set(files.known):
                    raise FetchError(f"{release.filename}: not cached; run once without --offline")
                files.ensure(wanted)
                log(f"drift: {project} {release.version} vs series {chosen}")
                cells += classify_release(files, series, pathlib.Path(tmp))
    return cells, notes
