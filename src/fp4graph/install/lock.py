"""Make a stack's lock: resolve its closure with uv (the lock file itself:
:mod:`fp4graph.model.locks`; the command: :mod:`fp4graph.commands.lock`).

A lock is the universal resolution of the stack's own pins against our index plus PyPI,
by ``uv pip compile --universal`` (one file for every CPython the stack's wheels serve,
any platform: markers where the answer differs), less those pins.  :func:`resolve` asks
uv; :func:`make_lock` adds the header; :func:`fresh_resolution` is the same resolution
without the lock, which the dependency drift report (:mod:`.deps`) compares with it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import pathlib
import subprocess
import tempfile
import zipfile
from collections.abc import Sequence

from packaging.utils import canonicalize_name, parse_wheel_filename

from ..model import manifest
from ..model.config import Settings
from ..model.errors import Fp4graphError
from ..model.locks import (
    LOCKS_DIR,
    Hold,
    Lock,
    LockedPin,
    lock_path,
    make,
    parse_pin,
    read,
    read_holds,
    write,
)
from ..model.log import log
from ..model.stacks import Catalog, Stack, load, served_name
from ..platforms.overrides import Override, TorchBuild, overrides_of, split_lines, torches_of
from ..wheels.build import built_pins
from ..wheels.fetch import fetch
from .serve import served

PYPI = "https://pypi.org/simple/"
LOWEST_PYTHON = "3.10"  # sglang's Requires-Python, the lowest CPython a lock covers


class LockError(Fp4graphError):
    """A stack could not be resolved into a lock."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Resolver:
    """How to run uv, and against which indexes (ours first: uv's default first-index
    strategy takes the names it has, sglang and flashinfer-python, only from it)."""

    uv: tuple[str, ...]  # e.g. (sys.executable, "-m", "uv")
    index_url: str  # our simple index
    default_index: str = PYPI
    python_version: str = LOWEST_PYTHON
    refresh: bool = False  # ask the indexes again, not uv's cache
    constraints: pathlib.Path | None = None  # the stack's holds
    # PyPI's sglang beside our flashinfer (a served release): ours serves sglang in other
    # versions (our sglang stacks'), which first-index would take as all there is.
    pypi_sglang: bool = False

    def command(self) -> list[str]:
        cmd = [*self.uv, "pip", "compile", "--universal", "--python-version", self.python_version,
               "--no-header", "--no-annotate", "--quiet", "--index", self.index_url,
               "--default-index", self.default_index]
        if self.pypi_sglang:
            cmd += ["--index-strategy", "unsafe-first-match"]
        if self.refresh:
            cmd.append("--refresh")
        if self.constraints:
            cmd += ["--constraint", str(self.constraints)]
        return [*cmd, "-"]


def resolve(resolver: Resolver, requirements: Sequence[str]) -> list[LockedPin]:
    """The universal resolution of ``requirements``: every package, exactly pinned."""
    cmd = resolver.command()
    result = subprocess.run(cmd, input="\n".join(requirements) + "\n", capture_output=True, text=True)
    if result.returncode != 0:
        raise LockError(f"{' '.join(cmd)} < {' '.join(requirements)}: exit {result.returncode}:\n"
                        + "\n".join(result.stderr.strip().splitlines()[-15:]))
    pins = []
    for number, line in enumerate(result.stdout.splitlines(), start=1):
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            pins.append(parse_pin(line, f"uv's output, line {number}") if "+" not in line.split(";")[0]
                        else _own_pin(line))
    return pins


def _own_pin(line: str) -> LockedPin:
    """One of our +fp4graph pins in uv's output (left out of the lock by :func:`make_lock`)."""
    name, _, version = line.split(";")[0].strip().partition("==")
    return LockedPin(name=name, version=version)


def pythons_of(wheel_names: Sequence[str]) -> list[str]:
    """The CPython versions (``3.11``) the stack's per-CPython wheels serve; [] for pure ones."""
    found = set()
    for name in wheel_names:
        for tag in parse_wheel_filename(name)[3]:
            if tag.interpreter.startswith("cp") and tag.interpreter[2:].isdigit():
                digits = tag.interpreter[2:]
                found.add(f"{digits[0]}.{digits[1:]}")
    return sorted(found, key=lambda v: tuple(map(int, v.split("."))))


def header(stack: str, pins: Sequence[str], *, pythons: Sequence[str], uv_version: str,
           holds: Sequence[Hold] = (), today: datetime.date | None = None,
           overrides: Sequence[Override] = (), torches: Sequence[TorchBuild] = (),
           served_by: str | None = None) -> list[str]:
    """The lock's header; ``served_by``: the flashinfer-only stack whose flashinfer a
    pristine sglang release (``stack`` is its served name, sglang-X) installs beside."""
    covers = (f"CPython {', '.join(pythons)} (the Pythons its sglang wheels serve)" if pythons
              else f"CPython >= {LOWEST_PYTHON}")
    made = (today or datetime.date.today()).isoformat()
    what = (f"fp4graph lock of {stack.replace('-', ' ', 1)} (PyPI's, pristine) beside stack {served_by} "
            f"(our flashinfer): the whole dependency closure of" if served_by else
            f"fp4graph lock of stack {stack}: the whole dependency closure of")
    return [
        what,
        f"  {' '.join(pins)}",
        "pinned exactly: pip install -c <this file> (see README, Installing from the internal index).",
        f"Those pins stay out: `python -m fp4graph pins {stack}` gives them.",
        f"For: {covers}, any platform the wheels exist for",
        f"(a universal resolution: `uv pip compile --universal --python-version {LOWEST_PYTHON}`, "
        "markers where the answer differs);",
        f"installed and imported on linux x86_64 by `nox -s install -- {stack}`, on linux aarch64",
        f"(DGX Spark; an emulated one here) by `nox -s install -- {stack} --platform linux-aarch64`.",
        *([f"{served_by} serves it: patches/stacks.toml; its sglang wheel pins that flashinfer exactly, "
           "which our +fp4graph build satisfies."] if served_by else []),
        f"Made by `python -m fp4graph lock {served_by or stack}` (uv {uv_version}) on {made}; "
        "review a change like patches/stacks.toml,",
        "and see what PyPI has moved since with `nox -s deps`.",
        *(f"Held (patches/locks/holds.toml): {h.requirement}: {h.why}" for h in holds),
        *(f"Overridden on {o.platform.name} (patches/locks/platforms.toml; uv --override): "
          f"{o.requirement}: {o.why}" for o in overrides),
        *(f"On {b.platform.name}: {b.requirement} from {b.index} (patches/locks/platforms.toml): {b.why}"
          for b in torches),
    ]


def make_lock(stack: str, own_pins: Sequence[str], resolved: Sequence[LockedPin], lock_header: Sequence[str]) -> Lock:
    names = [p.split("==")[0] for p in own_pins]
    missing = [n for n in names if canonicalize_name(n) not in {p.key for p in resolved}]
    if missing:
        raise LockError(f"stack {stack}: the resolution lacks {', '.join(missing)} (not served by our index?)")
    return make(stack, lock_header, resolved, leave_out=names)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LockOptions:
    uv: tuple[str, ...]
    index_url: str | None = None  # an index serving our wheels; None: serve wheels/ here
    refresh: bool = False
    out: pathlib.Path | None = None  # write <out>/locks/<stack>.txt instead of patches/locks/


def _uv_version(uv: Sequence[str]) -> str:
    out = subprocess.run([*uv, "--version"], capture_output=True, text=True)
    if out.returncode != 0:
        raise LockError(f"{' '.join(uv)} --version failed: {out.stderr.strip()}; install uv (pip install uv)")
    return out.stdout.split()[1] if len(out.stdout.split()) > 1 else out.stdout.strip()


def _built_wheels(wheels_dir: pathlib.Path, stack: str) -> list[str]:
    """The filenames of ``stack``'s wheels as built (``wheels_dir/manifest.json``)."""
    built = manifest.read_built(wheels_dir)
    return [w.filename for key in built.stack(stack).artifacts for w in built.artifacts[key].wheels]


def lock_names(catalog: Catalog, names: Sequence[str]) -> list[str]:
    """What ``lock`` makes for ``names``: a flashinfer-only stack that serves sglang
    releases stands for their served names (sglang-X, one lock each); the rest as given."""
    out: list[str] = []
    for name in names:
        serves = next((s.serves for s in catalog.stacks if s.name == name), ())
        out += [served_name(v) for v in serves] or [name]
    return out


def check_served(settings: Settings, catalog: Catalog, stack: Stack, release: str) -> None:
    """Refuse to lock a served release whose pinned sglang wheel does not pin the stack's
    flashinfer exactly (:meth:`Catalog.check_served_pin`); a release stacks.toml does not
    pin is left to the resolver."""
    if f"sglang=={release}" not in catalog.artifacts:
        return
    pinned = catalog.artifact("sglang", release).file()
    with zipfile.ZipFile(fetch(settings, "sglang", pinned)) as wheel:
        info = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        catalog.check_served_pin(stack, release, wheel.read(info).decode(), pinned.filename)


def _pythons(settings: Settings, catalog: Catalog, name: str, serving: tuple[Stack, str] | None) -> list[str]:
    """The CPythons of a stack's built wheels, or of a served release's pinned sglang wheels."""
    if serving and f"sglang=={serving[1]}" in catalog.artifacts:
        return pythons_of([f.filename for f in catalog.artifact("sglang", serving[1]).files])
    return pythons_of(_built_wheels(settings.wheels_dir, name))


def lock_stacks(settings: Settings, stacks: Sequence[str], options: LockOptions) -> list[pathlib.Path]:
    """Resolve each stack (or served release, sglang-X) against our index (``wheels/``
    served on 127.0.0.1, or ``options.index_url``) plus PyPI and write
    ``patches/locks/<name>.txt``."""
    uv_version = _uv_version(options.uv)
    catalog = load(settings.stacks_file)
    written = []
    with contextlib.ExitStack() as stack_ctx:
        index = options.index_url or stack_ctx.enter_context(served(settings.wheels_dir)) + "simple/"
        holds = read_holds(settings.patches_dir)
        tmp = pathlib.Path(stack_ctx.enter_context(tempfile.TemporaryDirectory(prefix="fp4graph-lock-")))
        for stack in lock_names(catalog, stacks):
            pins = built_pins(settings.wheels_dir, stack)
            serving = catalog.served_named(stack)
            if serving:
                check_served(settings, catalog, *serving)
            held = [h for h in holds if stack in h.stacks]
            constraints = tmp / f"{stack}-holds.txt"
            constraints.write_text("".join(h.requirement + "\n" for h in held))
            resolver = Resolver(uv=options.uv, index_url=index, refresh=options.refresh,
                                constraints=constraints if held else None, pypi_sglang=serving is not None)
            overrides = overrides_of(settings.patches_dir / LOCKS_DIR, stack)
            resolved = split_lines(resolve(resolver, pins), overrides)
            lock_header = header(stack, pins, pythons=_pythons(settings, catalog, stack, serving),
                                 uv_version=uv_version, holds=held, overrides=overrides,
                                 torches=torches_of(settings.patches_dir / LOCKS_DIR, stack),
                                 served_by=serving[0].name if serving else None)
            new = make_lock(stack, pins, resolved, lock_header)
            path = lock_path(options.out, stack) if options.out else lock_path(settings.patches_dir, stack)
            if _same_pins(path, new):
                log(f"{stack}: {path} unchanged")
            else:
                write(path, new)
                log(f"{stack}: wrote {path}")
            written.append(path)
    return written


def _same_pins(path: pathlib.Path, new: Lock) -> bool:
    """Whether ``path`` already locks what ``new`` does under the same header but for its
    date (then it is kept: a refresh that changes nothing leaves no diff)."""
    if not path.is_file():
        return False
    old = read(path, new.stack)

    def undated(lock: Lock) -> list[str]:
        return [h for h in lock.header if not h.startswith("Made by ")]

    return old.pins == new.pins and undated(old) == undated(new)


def fresh_resolution(settings: Settings, stack: str, options: LockOptions) -> list[LockedPin]:
    """The stack resolved now, without its lock, asking the indexes again."""
    with contextlib.ExitStack() as ctx:
        index = options.index_url or ctx.enter_context(served(settings.wheels_dir)) + "simple/"
        serving = load(settings.stacks_file).served_named(stack)
        resolver = Resolver(uv=options.uv, index_url=index, refresh=True, pypi_sglang=serving is not None)
        return resolve(resolver, built_pins(settings.wheels_dir, stack))
