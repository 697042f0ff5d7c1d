"""What an integration run installs: the stack's exact pins, the venv and the pip commands."""

from __future__ import annotations

import dataclasses
import pathlib
import shlex
from collections.abc import Sequence

from packaging.version import Version

from ..model import manifest, stacks
from ..model.errors import ConfigError
from ..model.manifest import Pin


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StackPins:
    stack: str
    pins: tuple[Pin, ...]
    source: str  # where the versions were read: the manifest or stacks.toml

    def pin_of(self, project: str) -> Pin:
        for pin in self.pins:
            if pin.project == project:
                return pin
        raise ConfigError(f"stack {self.stack!r} has no {project} pin (read from {self.source})")

    @property
    def sglang_version(self) -> str:
        """The upstream sglang version (without the local label)."""
        return self.pin_of("sglang").upstream_version


def stack_pins(repo: pathlib.Path, stack: str, wheels_dir: pathlib.Path | None = None) -> StackPins:
    """The pins of ``stack``: from ``wheels_dir/manifest.json`` when it lists the stack (what
    was built), else from patches/stacks.toml (patched version when a series exists)."""
    manifest_path = (wheels_dir or repo / "wheels") / manifest.FILENAME
    if manifest_path.is_file():
        built = manifest.read(manifest_path).find(stack)
        if built is not None:
            if not built.pins:
                raise ConfigError(f"{manifest_path}: stack {stack!r} lists no pins")
            return StackPins(stack=stack, pins=built.pins, source=str(manifest_path))
    catalog = stacks.load(repo / "patches" / "stacks.toml")
    chosen = catalog.stack(stack)
    pins = []
    for artifact in catalog.stack_artifacts(chosen):
        has_series = (repo / "patches" / artifact.project / artifact.version / "series").is_file()
        version = artifact.patched_version if has_series else artifact.version
        pins.append(Pin(project=artifact.project, version=Version(version)))
    return StackPins(stack=stack, pins=tuple(pins), source=str(repo / "patches" / "stacks.toml"))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class InstallPlan:
    """The venv sglang runs in, and the commands that make it."""

    work_dir: pathlib.Path
    venv: pathlib.Path
    base_python: str
    pins: StackPins
    find_links: pathlib.Path | None
    index_url: str | None
    # Installed after the pins, in their own pip call: requirements that conflict with a
    # pin of sglang's (transformers for a model type its pinned transformers lacks).
    overrides: tuple[str, ...] = ()

    @property
    def python(self) -> pathlib.Path:
        return self.venv / "bin" / "python"

    def missing_wheels(self) -> list[str]:
        """The patched pins no wheel in ``find_links`` provides (with no index to ask)."""
        if self.index_url or self.find_links is None:
            return []
        names = [p.name for p in self.find_links.glob("*.whl")] if self.find_links.is_dir() else []
        missing = []
        for pin in self.pins.pins:
            if not pin.patched:
                continue
            # Wheel file names normalise the project name (PEP 427): - and . become _.
            stem = f"{pin.project.replace('-', '_').replace('.', '_')}-{pin.version}-"
            if not any(n.startswith(stem) for n in names):
                missing.append(pin.requirement)
        return missing

    def with_overrides(self, *requirements: str) -> InstallPlan:
        """The same pins in a venv of its own, plus ``requirements`` installed over them."""
        name = "-".join(r.replace("==", "-") for r in requirements)
        return dataclasses.replace(self, venv=self.work_dir / f"venv-{name}", overrides=requirements)

    def commands(self) -> list[list[str]]:
        """Create the venv; install the pins with sglang's full dependencies.

        Patched wheels come from ``find_links`` (a wheels/ directory) or ``index_url`` (our
        index, added as an extra index so dependencies still resolve from PyPI); the exact
        ``==X+fp4graph.N`` pins mean no public upload can stand in for them.
        """
        install = [str(self.python), "-m", "pip", "install", "--upgrade-strategy", "only-if-needed"]
        if self.find_links is not None:
            install += ["--find-links", str(self.find_links)]
        if self.index_url:
            install += ["--extra-index-url", self.index_url]
        install += [pin.requirement for pin in self.pins.pins]
        commands = [
            [self.base_python, "-m", "venv", str(self.venv)],
            [str(self.python), "-m", "pip", "install", "--upgrade", "pip"],
            install,
        ]
        if self.overrides:
            commands.append([str(self.python), "-m", "pip", "install", *self.overrides])
        return commands


# Printed by the venv's python: the installed transformers version.
TRANSFORMERS_PROBE = "import importlib.metadata as m; print(m.version('transformers'))"


def make_plan(
    *,
    repo: pathlib.Path,
    stack: str,
    work_dir: pathlib.Path,
    base_python: str,
    wheels_dir: pathlib.Path | None,
    index_url: str | None,
) -> InstallPlan:
    wheels = wheels_dir or repo / "wheels"
    pins = stack_pins(repo, stack, wheels)
    find_links = wheels if wheels.is_dir() or not index_url else None
    return InstallPlan(
        work_dir=work_dir,
        venv=work_dir / "venv",
        base_python=base_python,
        pins=pins,
        find_links=find_links,
        index_url=index_url,
    )


def render(command: Sequence[str]) -> str:
    return shlex.join(command)
