"""Upstream's own checks (pre-commit hooks) run on the files a series touches.

The hooks and their versions are read from the tree's ``.pre-commit-config.yaml``.
Sdists do not ship that file; then the project's ``fallback_checks`` (``model.projects``,
taken from upstream's configuration) are used and the report says so.  Each tool runs from a virtual environment under
``<cache>/tools/`` with the exact versions the config pins (``tools="auto"``), or
from PATH (``tools="path"``, e.g. when a nox session installed them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ..model import projects
from ..model.errors import Fp4graphError
from ..model.files import atomic_directory
from ..model.log import log

_PY = re.compile(r"\.pyi?$")
# Options whose value is a configuration file in the tree.
_CONFIG_OPTIONS = frozenset({"--toml", "--config-file", "--settings-path"})


class CheckSetupError(Fp4graphError):
    """A check tool could not be found or installed."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Hook:
    """One pre-commit hook, as a command over files."""

    id: str
    requirements: tuple[str, ...]
    command: tuple[str, ...]  # the executable and its fixed arguments; files follow
    files: tuple[str, ...]  # every pattern must match
    exclude: tuple[str, ...]  # any pattern excludes
    python_only: bool

    @property
    def executable(self) -> str:
        return self.command[0]

    def selects(self, path: str) -> bool:
        if self.python_only and not _PY.search(path):
            return False
        if not all(re.search(p, path) for p in self.files):
            return False
        return not any(re.search(p, path) for p in self.exclude)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CheckResult:
    hook: str
    command: str
    files: tuple[str, ...]
    returncode: int
    output: str
    # The same hook also fails on these files as upstream has them (before the
    # series): the failure is not the series' (our copy of upstream's config may
    # differ from what that release used).
    fails_upstream: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def status(self) -> str:
        if self.ok:
            return "passed"
        return "failed on upstream's files too" if self.fails_upstream else "FAILED"

    @property
    def blocks(self) -> bool:
        """Whether the series is at fault: the check fails only with the series applied."""
        return not self.ok and not self.fails_upstream


def _version(rev: str) -> str:
    return rev[1:] if re.fullmatch(r"v\d.*", rev) else rev


def _hook(hook: Mapping[str, Any], rev: str) -> Hook | None:
    hid = str(hook["id"])
    args = tuple(str(a) for a in hook.get("args", []))
    extra = tuple(str(d) for d in hook.get("additional_dependencies", []))
    version = _version(rev)
    command: tuple[str, ...]
    if hid in ("ruff", "ruff-check"):
        req, command = f"ruff=={version}", ("ruff", "check", "--force-exclude", *args)
    elif hid == "ruff-format":
        req, command = f"ruff=={version}", ("ruff", "format", "--check", "--diff", "--force-exclude", *args)
    elif hid == "mypy":
        req, command = f"mypy=={version}", ("mypy", *args)
    elif hid in ("black", "black-jupyter"):
        req, command = f"black=={version}", ("black", "--check", "--diff", *args)
    elif hid == "isort":
        req, command = f"isort=={version}", ("isort", "--check-only", "--diff", *args)
    elif hid == "codespell":
        req, command = f"codespell=={version}", ("codespell", *args)
    else:
        return None
    return Hook(
        id=hid,
        requirements=(req, *extra),
        command=command,
        files=tuple(p for p in [hook.get("files")] if p),
        exclude=tuple(p for p in [hook.get("exclude")] if p),
        python_only=hid != "codespell",
    )


def load_config(tree: pathlib.Path, project: str) -> tuple[Mapping[str, Any], str]:
    """The pre-commit config of ``tree`` (or our fallback for ``project``) and its source."""
    path = tree / ".pre-commit-config.yaml"
    if path.is_file():
        try:
            import yaml
        except ImportError:
            raise CheckSetupError(
                f"{path}: reading it needs PyYAML; pip install pyyaml"
            ) from None
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return data, f"{path.name} in the tree"
    fallback = projects.get(project).fallback_checks
    return fallback, f"{fallback['source']} (the tree has no .pre-commit-config.yaml)"


def hooks_for(config: Mapping[str, Any], project: str) -> list[Hook]:
    """The hooks of ``config`` that fp4graph runs for ``project``, in config order."""
    wanted = projects.get(project).hooks
    top_files, top_exclude = config.get("files"), config.get("exclude")
    hooks = []
    for repo in config.get("repos", []):
        for raw in repo.get("hooks", []):
            if raw.get("id") not in wanted:
                continue
            hook = _hook(raw, str(repo.get("rev", "")))
            if hook is None:
                continue
            hooks.append(dataclasses.replace(
                hook,
                files=tuple(p for p in [top_files] if p) + hook.files,
                exclude=tuple(p for p in [top_exclude] if p) + hook.exclude,
            ))
    return hooks


def tool_env(cache_dir: pathlib.Path, requirements: Sequence[str]) -> pathlib.Path:
    """A cached virtual environment with exactly ``requirements``; its bin directory."""
    key = hashlib.sha256("\n".join(sorted(requirements)).encode()).hexdigest()[:16]
    venv = cache_dir / "tools" / key
    bindir = venv / "bin"
    if (venv / ".complete").is_file():
        return bindir
    with atomic_directory(venv, replace=True) as tmp:
        log(f"tools: venv for {' '.join(requirements)}")
        subprocess.run([sys.executable, "-m", "venv", str(tmp)], check=True, capture_output=True)
    result = subprocess.run(
        [str(bindir / "python"), "-m", "pip", "install", "-q", *requirements],
        capture_output=True, text=True,
    )
    if result.returncode != 0:
        raise CheckSetupError(
            f"cannot install {' '.join(requirements)} into {venv}: {result.stderr.strip()[-2000:]}"
        )
    (venv / ".complete").write_text("\n".join(requirements) + "\n")
    return bindir


def without_missing_configs(
    tree: pathlib.Path, args: Sequence[str]
) -> tuple[list[str], list[str]]:
    """``args`` less each config-file option naming a file ``tree`` lacks (a tree made
    from a wheel has no python/pyproject.toml), and the missing paths."""
    kept: list[str] = []
    missing: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg in _CONFIG_OPTIONS:
            path = next(rest, "")
            if (tree / path).is_file():
                kept += [arg, path]
            else:
                missing.append(path)
        else:
            kept.append(arg)
    return kept, missing


def run_hooks(
    tree: pathlib.Path,
    hooks: Sequence[Hook],
    files: Sequence[str],
    *,
    tools: str,
    cache_dir: pathlib.Path,
) -> list[CheckResult]:
    """Run each hook on the ``files`` it selects (that still exist), from ``tree``."""
    results = []
    for hook in hooks:
        selected = tuple(f for f in files if hook.selects(f) and (tree / f).is_file())
        if not selected:
            continue
        if tools == "auto":
            exe = str(tool_env(cache_dir, hook.requirements) / hook.executable)
        else:
            found = shutil.which(hook.executable)
            if found is None:
                raise CheckSetupError(
                    f"{hook.id}: {hook.executable} is not on PATH; install "
                    f"{' '.join(hook.requirements)} or use --tools auto"
                )
            exe = found
        args, missing = without_missing_configs(tree, hook.command[1:])
        cmd = [exe, *args, *selected]
        shown = subprocess.list2cmdline([hook.executable, *args, *selected])
        log(f"check {hook.id}: {shown}")
        env = dict(os.environ, NO_COLOR="1", MYPY_FORCE_COLOR="0")
        result = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, env=env)
        notes = "".join(f"({path} is not in the tree: checked without it)\n" for path in missing)
        results.append(CheckResult(
            hook=hook.id, command=shown, files=selected, returncode=result.returncode,
            output=(notes + result.stdout + result.stderr).strip(),
        ))
    return results



def mark_upstream_failures(
    results: Sequence[CheckResult],
    hooks: Sequence[Hook],
    tree: pathlib.Path,
    base_tree: pathlib.Path,
    *,
    tools: str,
    cache_dir: pathlib.Path,
) -> list[CheckResult]:
    """``results`` with ``fails_upstream`` set on each failed check whose every
    failing file (checked one by one) fails the same way in ``base_tree``, the
    tree before the series; a file the series adds is always the series'."""
    by_id = {h.id: h for h in hooks}

    def passes(root: pathlib.Path, hook: Hook, path: str) -> bool:
        run = run_hooks(root, [hook], [path], tools=tools, cache_dir=cache_dir)
        return all(r.ok for r in run)

    marked = []
    for result in results:
        if not result.ok:
            hook = by_id[result.hook]
            ours = [f for f in result.files
                    if not passes(tree, hook, f) and (not (base_tree / f).is_file()
                                                      or passes(base_tree, hook, f))]
            result = dataclasses.replace(result, fails_upstream=not ours)
        marked.append(result)
    return marked
