"""Apply a series to an unpacked wheel at zero fuzz with ``git apply``.

Patch paths are upstream-repo-relative.  Each project's layout (``model.projects``) says
which repo prefix maps to the wheel root (sglang keeps its package under ``python/``);
hunks for files outside the wheel's top-level packages (upstream tests, docs)
are skipped for the wheel build and kept in the patch for pull requests.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import subprocess

from ..model import projects
from ..model.errors import PatchError
from ..model.log import log
from ..model.projects import Layout
from ..model.series import DIFF_HEADER, Patch, Series

_SECTION = re.compile(r"^diff --git ", re.M)
_HUNK = re.compile(r"^@@ -(?P<start>\d+)(?:,\d+)? \+\d+(?:,\d+)? @@.*$", re.M)
_SIGNATURE = re.compile(r"\n-- \n[^\n]*\n*\Z")
_FAILED_AT = re.compile(r"error: patch failed: (?P<file>.+):(?P<line>\d+)")
_FILE_ERROR = re.compile(r"error: (?P<file>[^:]+): (?P<why>.+)")


def wheel_roots(tree: pathlib.Path) -> set[str]:
    """Top-level names a wheel installs, other than its metadata directories."""
    return {
        p.name for p in tree.iterdir() if not p.name.endswith((".dist-info", ".data"))
    }


@dataclasses.dataclass(frozen=True, slots=True)
class FileDiff:
    repo_path: str
    text: str

    def hunk_at(self, old_line: int) -> str:
        """Describe the hunk that starts at ``old_line`` of the original file."""
        hunks = list(_HUNK.finditer(self.text))
        for number, hunk in enumerate(hunks, 1):
            if int(hunk["start"]) == old_line:
                return f"hunk #{number} of {len(hunks)} ({hunk.group(0).split(' @@')[0]} @@)"
        return f"the hunk at line {old_line}"


def split_diff(patch: Patch) -> list[FileDiff]:
    diff = _SIGNATURE.sub("\n", patch.diff)
    starts = [m.start() for m in _SECTION.finditer(diff)]
    sections = [diff[a:b] for a, b in zip(starts, [*starts[1:], len(diff)], strict=True)]
    result = []
    for text in sections:
        match = DIFF_HEADER.match(text)
        if match is None:
            raise PatchError(f"{patch.path}: cannot read the file names in {text.splitlines()[0]!r}")
        result.append(FileDiff(match["new"], text if text.endswith("\n") else text + "\n"))
    return result


def wheel_part(patch: Patch, layout: Layout, roots: set[str]) -> list[FileDiff]:
    """The per-file diffs of ``patch`` that land inside the wheel."""
    kept = []
    for file_diff in split_diff(patch):
        inside = layout.wheel_path(file_diff.repo_path)
        if inside is not None and inside.split("/", 1)[0] in roots:
            kept.append(file_diff)
    return kept


def _explain(patch: Patch, diffs: list[FileDiff], layout: Layout, stderr: str) -> str:
    by_wheel_path = {layout.wheel_path(d.repo_path): d for d in diffs}
    for line in stderr.splitlines():
        failed = _FAILED_AT.match(line)
        if failed and failed["file"] in by_wheel_path:
            diff = by_wheel_path[failed["file"]]
            return (
                f"{patch.name}: {diff.repo_path}: {diff.hunk_at(int(failed['line']))} "
                "does not apply at zero fuzz"
            )
    for line in stderr.splitlines():
        broken = _FILE_ERROR.match(line)
        if broken:
            return f"{patch.name}: {broken['file']}: {broken['why']}"
    return f"{patch.name}: git apply failed: {stderr.strip()}"


def apply_patch(patch: Patch, tree: pathlib.Path, layout: Layout) -> list[str]:
    """Apply the wheel part of ``patch`` to ``tree``; return the repo paths it changed."""
    diffs = wheel_part(patch, layout, wheel_roots(tree))
    if not diffs:
        return []
    cmd = ["git", "apply", f"-p{layout.strip}", "--whitespace=nowarn", "-"]
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tree.parent))
    log(f"apply {patch.name}: {subprocess.list2cmdline(cmd)} in {tree}")
    result = subprocess.run(
        cmd,
        input="".join(d.text for d in diffs),
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise PatchError(f"{patch.path}: " + _explain(patch, diffs, layout, result.stderr))
    return [d.repo_path for d in diffs]


def apply_series(series: Series, tree: pathlib.Path) -> dict[str, list[str]]:
    """Apply every patch in order; return, per patch, the repo paths it changed.

    A series with an unresolved patch, or without a topic its project requires, is refused
    first: it must never become a ``+fp4graph`` wheel.
    """
    series.require_complete()
    layout = projects.get(series.project).layout
    return {patch.name: apply_patch(patch, tree, layout) for patch in series.patches}
