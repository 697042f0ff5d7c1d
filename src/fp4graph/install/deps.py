"""The dependency drift report: what PyPI's newest versions would change in each lock, and
(heavy) whether the stack still installs and imports with them.

Light: each stack resolved afresh without its lock or holds (:func:`.lock.fresh_resolution`),
compared with its lock (:func:`compare`).  Heavy: the stack also installed without
its lock (:func:`.stack.install_stack` with ``lock=None``) and put through the same
``pip check`` and import smoke: a lock is moved on purpose, once the newest passes.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
from collections.abc import Callable, Sequence

from packaging.utils import canonicalize_name

from ..model.config import Settings
from ..model.files import write_atomic
from ..model.locks import Lock, LockedPin, lock_path, read, read_holds
from ..wheels.build import built_pins
from . import lock
from .stack import InstallOptions, InstallReport, install_stack, summary


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Change:
    """A package whose versions differ between the lock and a fresh resolution."""

    name: str
    locked: tuple[str, ...]  # () when the fresh resolution adds it
    newest: tuple[str, ...]  # () when it drops it

    @property
    def text(self) -> str:
        if not self.locked:
            return f"{self.name}: added {', '.join(self.newest)}"
        if not self.newest:
            return f"{self.name}: dropped (locked {', '.join(self.locked)})"
        return f"{self.name}: {', '.join(self.locked)} -> {', '.join(self.newest)}"


def compare(lock: Lock, fresh: Sequence[LockedPin], own: Sequence[str] = ()) -> list[Change]:
    """What a fresh resolution changes against ``lock`` (our own pins aside, and the names
    in ``own``: the stack's pins, which a lock leaves out, as a served release's sglang)."""
    skip = {canonicalize_name(name.partition("==")[0]) for name in own}

    def versions(pins: Sequence[LockedPin]) -> dict[str, tuple[str, ...]]:
        out: dict[str, set[str]] = {}
        for p in pins:
            if "+" not in p.version and p.key not in skip:
                out.setdefault(p.key, set()).add(p.version)
        return {k: tuple(sorted(v)) for k, v in out.items()}

    old, new = versions(lock.pins), versions(fresh)
    return [Change(name=k, locked=old.get(k, ()), newest=new.get(k, ()))
            for k in sorted(old.keys() | new.keys()) if old.get(k) != new.get(k)]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DepsOptions:
    resolver: lock.LockOptions
    # Heavy mode: the install options of a stack, unlocked (None: light mode).
    unlocked_install: Callable[[str], InstallOptions] | None = None


@dataclasses.dataclass(kw_only=True)
class StackDrift:
    stack: str
    lock_file: str
    changes: list[Change]
    held: list[str]
    unlocked: InstallReport | None = None  # heavy mode: the install without the lock

    def to_json(self) -> dict[str, object]:
        return {"stack": self.stack, "lock": self.lock_file, "held": self.held,
                "changes": [dataclasses.asdict(c) | {"text": c.text} for c in self.changes],
                "unlocked_install": self.unlocked.to_json() if self.unlocked else None}


def drift(settings: Settings, stacks: Sequence[str], options: DepsOptions) -> list[StackDrift]:
    holds = read_holds(settings.patches_dir)
    out = []
    for name in stacks:
        path = lock_path(settings.patches_dir, name)
        fresh = lock.fresh_resolution(settings, name, options.resolver)
        result = StackDrift(stack=name, lock_file=str(path.relative_to(settings.repo)),
                            changes=compare(read(path, name), fresh, built_pins(settings.wheels_dir, name)),
                            held=[f"{h.requirement}: {h.why}" for h in holds if name in h.stacks])
        if options.unlocked_install is not None:
            install = options.unlocked_install(name)
            try:
                result.unlocked = install_stack(install)
            finally:
                shutil.rmtree(install.venv, ignore_errors=True)
        out.append(result)
    return out


def markdown(results: Sequence[StackDrift]) -> str:
    lines = ["# Dependency drift: each lock against what resolves today", ""]
    for r in results:
        lines.append(f"## {r.stack} ({r.lock_file})")
        lines.append("")
        lines += [f"- held: {h}" for h in r.held]
        if not r.changes:
            lines.append("- no change: the newest versions are the locked ones")
        lines += [f"- {c.text}" for c in r.changes]
        if r.unlocked is not None:
            verdict = "installs and imports" if r.unlocked.ok else "BREAKS: " + ", ".join(
                f"{s.name} ({s.detail})" for s in r.unlocked.failed)
            lines += ["", f"Unlocked install: {verdict}", "", "```", *summary(r.unlocked), "```"]
        lines.append("")
    return "\n".join(lines)


def write_reports(out: pathlib.Path, results: Sequence[StackDrift]) -> tuple[pathlib.Path, pathlib.Path]:
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / "deps-drift.md", out / "deps-drift.json"
    write_atomic(md, markdown(results))
    write_atomic(js, json.dumps([r.to_json() for r in results], indent=2) + "\n")
    return md, js
