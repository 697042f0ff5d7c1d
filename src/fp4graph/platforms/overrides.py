"""What a stack installs differently on one platform: ``patches/locks/platforms.toml``.

Two kinds of entries, each with the stacks it applies to and why:

- :class:`Override`: a package whose exactly pinned version has no wheel for the platform,
  replaced by another version (``uv pip install --override``); the lock's line for it is
  split by ``platform_machine`` (:func:`split_lines`);
- :class:`TorchBuild` (``[[torch]]``): the CUDA build of torch where PyPI's is a CPU build,
  pinned with its local version, from PyTorch's own index;
- the same for another package (``[[build]]``): its build for the platform's CUDA where
  PyPI's wheel is built for another CUDA major (sgl-kernel's cu130 build on a DGX Spark),
  from its project's own index.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Sequence
from typing import Any

import tomllib
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ..model.errors import ConfigError
from ..model.locks import LockedPin
from .targets import Platform, platform_named

FILENAME = "platforms.toml"  # under patches/locks/


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Override:
    platform: Platform
    stacks: tuple[str, ...]
    requirement: str  # name==version
    why: str

    @property
    def name(self) -> str:
        return canonicalize_name(self.requirement.split("==", 1)[0])

    @property
    def version(self) -> str:
        return self.requirement.split("==", 1)[1]

    @property
    def marker(self) -> str:
        return f'platform_machine == "{self.platform.machine}"'


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TorchBuild:
    """A package's build from its own index (``[[torch]]``: torch's; ``[[build]]``: another's)."""

    platform: Platform
    stacks: tuple[str, ...]
    requirement: str  # torch==2.9.1+cu130
    index: str
    why: str

    @property
    def name(self) -> str:
        return canonicalize_name(self.requirement.split("==", 1)[0])


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PlatformPins:
    """What ``stack`` needs on ``platform`` beyond its lock and pins."""

    overrides: tuple[Override, ...] = ()
    torch: TorchBuild | None = None
    builds: tuple[TorchBuild, ...] = ()  # other packages' builds from their own index ([[build]])

    @property
    def indexed(self) -> tuple[TorchBuild, ...]:
        """Every build from its own index: torch's first."""
        return (*([self.torch] if self.torch else []), *self.builds)


def _entry(raw: Any, where: str, path: pathlib.Path, fields: set[str]) -> dict[str, Any]:
    if not isinstance(raw, dict) or set(raw) != fields:
        raise ConfigError(f"{path}: {where}: needs exactly {', '.join(sorted(fields))}")
    try:
        req = Requirement(str(raw["requirement"]))
    except InvalidRequirement as exc:
        raise ConfigError(f"{path}: {where}: requirement {raw['requirement']!r}: {exc}") from None
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator != "==" or req.marker or req.extras:
        raise ConfigError(f"{path}: {where}: {raw['requirement']!r} is not an exact name==version")
    try:
        platform = platform_named(str(raw["platform"]))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {where}: {exc}") from None
    return {"platform": platform, "stacks": tuple(map(str, raw["stacks"])),
            "requirement": str(raw["requirement"]), "why": " ".join(str(raw["why"]).split()),
            **({"index": str(raw["index"])} if "index" in raw else {})}


def read(locks_dir: pathlib.Path) -> tuple[list[Override], list[TorchBuild]]:
    """Every entry of ``<locks_dir>/platforms.toml`` (none when it does not exist): the
    overrides, and the builds from their own index (``[[torch]]`` first, then ``[[build]]``)."""
    path = locks_dir / FILENAME
    if not path.is_file():
        return [], []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not TOML ({exc})") from None
    base = {"platform", "stacks", "requirement", "why"}
    overrides = [Override(**_entry(raw, f"[[override]] #{n}", path, base))
                 for n, raw in enumerate(data.get("override", []), start=1)]
    builds = []
    for table in ("torch", "build"):
        for n, raw in enumerate(data.get(table, []), start=1):
            build = TorchBuild(**_entry(raw, f"[[{table}]] #{n}", path, base | {"index"}))
            if (build.name == "torch") != (table == "torch"):
                raise ConfigError(f"{path}: [[{table}]] #{n}: {build.requirement!r} belongs in "
                                  f"[[{'torch' if build.name == 'torch' else 'build'}]]")
            builds.append(build)
    return overrides, builds


def overrides_of(locks_dir: pathlib.Path, stack: str) -> list[Override]:
    """The overrides of ``stack`` on every platform."""
    return [o for o in read(locks_dir)[0] if stack in o.stacks]


def torches_of(locks_dir: pathlib.Path, stack: str) -> list[TorchBuild]:
    """The builds from their own index (torch's CUDA build, sgl-kernel's) of ``stack`` on
    every platform."""
    return [b for b in read(locks_dir)[1] if stack in b.stacks]


def platform_pins(locks_dir: pathlib.Path, stack: str, platform: Platform) -> PlatformPins:
    overrides, builds = read(locks_dir)
    mine = [b for b in builds if stack in b.stacks and b.platform == platform]
    torch = [b for b in mine if b.name == "torch"]
    return PlatformPins(
        overrides=tuple(o for o in overrides if stack in o.stacks and o.platform == platform),
        torch=torch[0] if torch else None, builds=tuple(b for b in mine if b.name != "torch"))


def split_lines(pins: Sequence[LockedPin], overrides: Sequence[Override]) -> list[LockedPin]:
    """Lock lines with each overridden package's unmarked line split: the locked version
    where the platform's machine is not, the override's there."""
    out = []
    for pin in pins:
        mine = [o for o in overrides if o.name == pin.key]
        if not mine or pin.marker is not None:
            out.append(pin)
            continue
        machines = " and ".join(f'platform_machine != "{o.platform.machine}"' for o in mine)
        out.append(dataclasses.replace(pin, marker=machines))
        out += [LockedPin(name=pin.name, version=o.version, marker=o.marker) for o in mine]
    return out
