"""A stack's lock: the exact versions of its whole dependency closure, as a constraints file.

``patches/locks/<stack>.txt`` is a pip constraints file (``pip install -c``, every pip reads
it; uv too): one ``name==version`` line per package, with an environment marker where the
resolution differs between Pythons or platforms (``uv pip compile --universal`` writes such
lines: a name may then appear once per marker), and a ``#`` header saying what it is for.
The stack's own ``+fp4graph`` pins stay out (``python -m fp4graph pins`` gives them) and
so does anything not on an index (URLs, local versions, extras): a lock names PyPI releases
only.  Made and refreshed by ``python -m fp4graph lock``, reviewed like stacks.toml,
published by ``nox -s wheels`` as ``wheels/locks/<stack>.txt``.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterable, Sequence

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from .errors import ConfigError
from .files import write_atomic

LOCKS_DIR = "locks"  # under patches/ (the reviewed source) and wheels/ (what is published)


def lock_path(patches_dir: pathlib.Path, stack: str) -> pathlib.Path:
    return patches_dir / LOCKS_DIR / f"{stack}.txt"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LockedPin:
    """``name==version`` for the environments ``marker`` selects (None: every one)."""

    name: str  # as written (canonicalized for comparisons)
    version: str
    marker: str | None = None

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)

    @property
    def line(self) -> str:
        return f"{self.name}=={self.version}" + (f" ; {self.marker}" if self.marker else "")

    def applies(self, environment: dict[str, str] | None = None) -> bool:
        return self.marker is None or Marker(self.marker).evaluate(environment)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Lock:
    stack: str
    header: tuple[str, ...]  # the comment lines, without "# "
    pins: tuple[LockedPin, ...]

    def versions(self, environment: dict[str, str] | None = None) -> dict[str, str]:
        """{canonical name: version} of the pins whose marker holds in ``environment``
        (default: this interpreter's)."""
        return {p.key: p.version for p in self.pins if p.applies(environment)}

    def render(self) -> str:
        head = "".join(f"# {line}".rstrip() + "\n" for line in self.header)
        body = "".join(p.line + "\n" for p in sorted(self.pins, key=lambda p: (p.key, p.marker or "")))
        return head + body


def parse_pin(text: str, where: str) -> LockedPin:
    """One lock line; ``where`` (``file:line``) names it in the error."""
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        raise ConfigError(f"{where}: {text!r} is not a requirement ({exc}); "
                          "a lock line is name==version [; marker]") from None
    specs = list(req.specifier)
    if req.url or req.extras or len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
        raise ConfigError(f"{where}: {text!r} is not an exact pin; a lock line is name==version [; marker] "
                          "(no extras, URLs or ranges): regenerate it with `python -m fp4graph lock`")
    if "+" in specs[0].version:
        raise ConfigError(f"{where}: {text!r} pins a local version; a lock holds index releases only "
                          "(our +fp4graph pins come from `python -m fp4graph pins`)")
    return LockedPin(name=req.name, version=specs[0].version, marker=str(req.marker) if req.marker else None)


def check_unique(pins: Iterable[tuple[LockedPin, str]]) -> None:
    """Refuse a package named twice for an environment: a second line for a name is allowed
    only when both lines carry different markers (a universal resolution's forks)."""
    seen: dict[str, list[tuple[LockedPin, str]]] = {}
    for pin, where in pins:
        for other, other_where in seen.get(pin.key, []):
            if other.marker is None or pin.marker is None or other.marker == pin.marker:
                raise ConfigError(f"{where}: {pin.name} is locked twice (also at {other_where}); "
                                  "keep one line, or give each its own environment marker")
        seen.setdefault(pin.key, []).append((pin, where))


def parse(text: str, path: pathlib.Path, stack: str) -> Lock:
    header: list[str] = []
    pins: list[tuple[LockedPin, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if not pins:
                header.append(line[1:].removeprefix(" "))
            continue
        line = line.split(" #", 1)[0].strip()
        pins.append((parse_pin(line, f"{path}:{number}"), f"{path}:{number}"))
    if not pins:
        raise ConfigError(f"{path}: locks nothing; regenerate it with `python -m fp4graph lock {stack}`")
    check_unique(pins)
    return Lock(stack=stack, header=tuple(header), pins=tuple(p for p, _ in pins))


def read(path: pathlib.Path, stack: str | None = None) -> Lock:
    """The lock at ``path`` (its stack is the file name's stem unless given)."""
    name = stack or path.name.removesuffix(".txt")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no lock for stack {name!r}; make it with "
                          f"`python -m fp4graph lock {name}`") from None
    return parse(text, path, name)


def make(stack: str, header: Sequence[str], pins: Iterable[LockedPin], *, leave_out: Iterable[str] = ()) -> Lock:
    """A lock of ``pins`` less the names in ``leave_out`` (the stack's own pins), checked
    as :func:`parse` checks a file."""
    skip = {canonicalize_name(n) for n in leave_out}
    kept = [p for p in pins if p.key not in skip]
    where = f"lock of {stack}"
    for pin in kept:
        parse_pin(pin.line, where)
    check_unique((p, f"{where}, {p.line}") for p in kept)
    return Lock(stack=stack, header=tuple(header), pins=tuple(kept))


def write(path: pathlib.Path, lock: Lock) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lock.render())
    return path


HOLDS_FILE = "holds.toml"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Hold:
    """A requirement a stack's lock keeps (``kernels<0.17``), and why."""

    stacks: tuple[str, ...]
    requirement: str
    why: str


def read_holds(patches_dir: pathlib.Path) -> list[Hold]:
    """``patches/locks/holds.toml`` (none when it does not exist)."""
    import tomllib

    path = patches_dir / LOCKS_DIR / HOLDS_FILE
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not TOML ({exc})") from None
    holds = []
    for number, raw in enumerate(data.get("hold", []), start=1):
        where = f"{path}: [[hold]] #{number}"
        if not isinstance(raw, dict) or set(raw) != {"stacks", "requirement", "why"}:
            raise ConfigError(f"{where}: needs exactly stacks, requirement and why")
        try:
            Requirement(str(raw["requirement"]))
        except InvalidRequirement as exc:
            raise ConfigError(f"{where}: requirement {raw['requirement']!r}: {exc}") from None
        holds.append(Hold(stacks=tuple(map(str, raw["stacks"])), requirement=str(raw["requirement"]),
                          why=" ".join(str(raw["why"]).split())))
    return holds
