"""Has upstream fixed it its own way?  The evidence of each ``UpstreamFix`` of a project
(``model.projects``: patterns that hold, or must be absent, in named files or functions),
checked in one release's files."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence

from ...model import projects as registry
from ...model.projects import Evidence, UpstreamFix
from ...model.series import Patch
from .release_files import ReleaseFiles


def function_source(text: str, name: str) -> str | None:
    """The source of the module-level function ``name`` in ``text``, decorators included."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    lines = text.splitlines(keepends=True)
    nodes: list[ast.stmt] = list(tree.body)
    while nodes:
        node = nodes.pop(0)
        if isinstance(node, ast.If | ast.Try):  # `if HAS_X: def f(...)`, `try: ... except`
            nodes[:0] = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                         *(s for h in getattr(node, "handlers", []) for s in h.body)]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            return "".join(lines[first - 1 : node.end_lineno])
    return None


def holds(files: ReleaseFiles, evidence: Evidence) -> bool:
    """Whether ``evidence`` holds in the release: decided by the first member that exists
    (and defines the function, with ``within``); False when none does."""
    for member in evidence.members:
        text = files.text(member)
        if text is not None and evidence.within is not None:
            text = function_source(text, evidence.within)
        if text is not None:
            return bool(evidence.pattern.search(text)) != evidence.absent
    return False


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """An upstream fix checked in one release: which of its evidence holds."""

    fix: UpstreamFix
    held: tuple[Evidence, ...]
    missing: tuple[Evidence, ...]

    @property
    def complete(self) -> bool:
        return not self.missing

    def describe(self) -> str:
        if self.complete:
            return self.fix.what
        has = "; ".join(e.says for e in self.held)
        lacks = "; ".join(e.says for e in self.missing)
        return (f"not superseded: upstream has part of it ({self.fix.what}): {has}; "
                f"but not: {lacks}")


def detect_fixes(files: ReleaseFiles, project: str) -> list[Finding]:
    """Every upstream fix of ``project`` with at least one piece of evidence in the release."""
    found = []
    for fix in registry.get(project).upstream_fixes:
        held = tuple(e for e in fix.evidence if holds(files, e))
        if any(not e.absent for e in held):  # an absence alone shows nothing
            missing = tuple(e for e in fix.evidence if e not in held)
            found.append(Finding(fix=fix, held=held, missing=missing))
    return found


def superseding(findings: Sequence[Finding], patch: Patch) -> tuple[list[Finding], list[Finding]]:
    """(complete fixes that together cover every topic of ``patch``, else [];
    partial fixes of its topics)."""
    topics = set(patch.topics)
    mine = [f for f in findings if topics & set(f.fix.topics)]
    complete = [f for f in mine if f.complete]
    covered = {t for f in complete for t in f.fix.topics}
    return (complete if topics and topics <= covered else []), [f for f in mine if not f.complete]
