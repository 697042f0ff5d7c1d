"""``wheels/manifest.json``: what a build made, as typed records, with one reader and one writer.

The file (``nox -s wheels`` writes it beside the wheels and the index)::

    {"format": 1, "fp4graph": "0.1.0",
     "stacks": [{"name": "sglang-0.5.9", "artifacts": ["sglang==0.5.9", ...],
                 "pins": ["sglang==0.5.9+fp4graph.4", "flashinfer-python==0.6.3+fp4graph.3"],
                 "lock": {"path": "locks/sglang-0.5.9.txt", "sha256": ...}}],
     "artifacts": {"sglang==0.5.9": {"project": "sglang", "upstream_version": "0.5.9",
                                     "version": "0.5.9+fp4graph.4", "upstream_files": [...],
                                     "series": {"path", "sha256", "patches": [...]} or null,
                                     "wheels": [{"filename", "sha256", "upstream_filename",
                                                 "upstream_sha256"}]}},
     "kernels": [{"filename", "sha256", "version": "0.6.3+cu130.fp4graph.4.sm120a",
                  "flashinfer": "flashinfer-python==0.6.3+fp4graph.4", "flashinfer_sha256",
                  "arch": "12.0a", "cuda": "13.0", "modules": [{"kind", "name", "sha256"}],
                  "toolchain": {...}}]}

A pin is written ``project==version`` and read as a :class:`Pin` with a parsed
:class:`~packaging.version.Version`: its series revision is the ``N`` of the local label
``fp4graph.N``.  Manifests from before ``format`` was written read as format 1.

A new field is one attribute on its record: the reader and writer follow the dataclass
fields (a field with a default may be absent from older files; keys this version does not
know are ignored, so an older fp4graph reads a newer manifest of the same format).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import json
import pathlib
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from packaging.version import InvalidVersion, Version

from .errors import Fp4graphError
from .files import write_atomic
from .stacks import ArtifactFile, served_name

FILENAME = "manifest.json"
FORMAT = 1
LOCAL_LABEL = "fp4graph"  # the local version label of a patched build: X+fp4graph.N


class ManifestError(Fp4graphError):
    """wheels/manifest.json is missing, malformed, of an unknown format or lacks a stack."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Pin:
    """One exact requirement ``project==version``; a patched build's version is ``X+fp4graph.N``."""

    project: str
    version: Version

    @classmethod
    def parse(cls, requirement: str) -> Pin:
        """``project==version``; a ValueError says what is wrong."""
        project, sep, version = requirement.partition("==")
        if not sep or not project.strip() or not version.strip():
            raise ValueError(f"pin {requirement!r} is not 'project==version'")
        try:
            return cls(project=project.strip(), version=Version(version.strip()))
        except InvalidVersion:
            raise ValueError(f"pin {requirement!r}: {version.strip()!r} is not a PEP 440 version") from None

    @property
    def requirement(self) -> str:
        return f"{self.project}=={self.version}"

    @property
    def upstream_version(self) -> str:
        """The version without its local label (the upstream release)."""
        return self.version.public

    @property
    def revision(self) -> int | None:
        """The ``N`` of a ``+fp4graph.N`` build; None for an upstream version."""
        label, _, number = (self.version.local or "").partition(".")
        return int(number) if label == LOCAL_LABEL and number.isdigit() else None

    @property
    def patched(self) -> bool:
        return self.revision is not None

    def to_json(self) -> str:
        return self.requirement

    @classmethod
    def from_json(cls, value: object) -> Pin:
        if not isinstance(value, str):
            raise ValueError(f"pin {value!r} is not a string 'project==version'")
        return cls.parse(value)

    def as_dict(self) -> dict[str, Any]:
        """The pin spelled out (``pins --json``)."""
        return {"project": self.project, "version": str(self.version), "requirement": self.requirement,
                "upstream_version": self.upstream_version, "revision": self.revision}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BuiltWheel:
    filename: str
    sha256: str
    upstream_filename: str
    upstream_sha256: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PatchRecord:
    name: str
    subject: str
    sha256: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SeriesRecord:
    path: str  # patches/<project>/<version>/series
    sha256: str  # the series digest (model.series.Series.digest)
    patches: tuple[PatchRecord, ...]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BuiltArtifact:
    """One pinned upstream release as built: its upstream files, series and patched wheels."""

    project: str
    upstream_version: str
    version: Version  # X+fp4graph.N when a series was applied, else the upstream version
    upstream_files: tuple[ArtifactFile, ...]
    series: SeriesRecord | None
    wheels: tuple[BuiltWheel, ...]

    @property
    def pin(self) -> Pin:
        return Pin(project=self.project, version=self.version)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PublishedLock:
    """A stack's lock as published beside the index (:mod:`fp4graph.model.locks`)."""

    path: str  # locks/<stack>.txt, relative to wheels/
    sha256: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BuiltServed:
    """A pristine sglang release a flashinfer-only stack serves, and the lock of its closure
    beside the stack's wheels (``locks/sglang-<release>.txt``; None: not locked)."""

    sglang: str
    lock: PublishedLock | None = None

    @property
    def name(self) -> str:
        """What its lock, pins files and install go by: ``sglang-<release>``."""
        return served_name(self.sglang)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BuiltStack:
    """A stack as built: its artifacts (keys of :attr:`Manifest.artifacts`), exact pins and
    the lock of the rest of its closure (None: the stack has no lock, or no sglang); a
    flashinfer-only stack, the sglang releases it serves."""

    name: str
    artifacts: tuple[str, ...]
    pins: tuple[Pin, ...]
    lock: PublishedLock | None = None
    served: tuple[BuiltServed, ...] = ()

    def pin(self, project: str) -> Pin | None:
        return next((p for p in self.pins if p.project == project), None)

    def serving(self, served: BuiltServed) -> BuiltStack:
        """``served`` as a stack of its own: PyPI's sglang pinned beside this stack's pins,
        with its lock."""
        pins = (Pin(project="sglang", version=Version(served.sglang)), *self.pins)
        return BuiltStack(name=served.name, artifacts=self.artifacts, pins=pins, lock=served.lock)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class KernelModule:
    """One prebuilt FlashInfer JIT module of a kernels wheel."""

    kind: str  # the flashinfer.fp4_warmup kind (or "probe", fp4graph's CI module)
    name: str  # the JIT module name: flashinfer_jit_cache/jit_cache/<name>/<name>.so
    sha256: str  # of the .so


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BuiltKernels:
    """A flashinfer-jit-cache wheel of prebuilt fp4 modules for one SM12x arch
    (``nox -s kernels``), built from a patched flashinfer of this manifest."""

    filename: str
    sha256: str
    version: Version  # 0.6.3+cu130.fp4graph.4.sm120a
    flashinfer: Pin  # the patched flashinfer-python it was built from (and loads beside)
    flashinfer_sha256: str  # of that patched wheel
    arch: str  # as FLASHINFER_CUDA_ARCH_LIST spells it: 12.0a
    cuda: str  # the nvcc release: 13.0
    modules: tuple[KernelModule, ...]
    toolchain: Mapping[str, str]  # what else decides the bytes (nvcc, c++, tvm-ffi, ...)

    @property
    def pin(self) -> Pin:
        return Pin(project=KERNELS_PROJECT, version=self.version)


KERNELS_PROJECT = "flashinfer-jit-cache"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Manifest:
    fp4graph: str  # the engine version that wrote it
    stacks: tuple[BuiltStack, ...]
    artifacts: Mapping[str, BuiltArtifact]
    format: int = FORMAT
    # The kernels wheels beside the stacks' wheels (nox -s kernels), by filename.
    kernels: tuple[BuiltKernels, ...] = ()
    # Where it was read from (for messages); not written.
    path: pathlib.Path | None = dataclasses.field(default=None, compare=False, metadata={"json": False})

    def find(self, name: str) -> BuiltStack | None:
        """The stack ``name``, or the sglang release ``name`` (``sglang-X``) a built
        flashinfer-only stack serves, as :meth:`BuiltStack.serving` makes it."""
        return next((s for s in self.installable() if s.name == name), None)

    def installable(self) -> tuple[BuiltStack, ...]:
        """Every stack, then every served sglang release as its own stack."""
        return (*self.stacks, *(s.serving(r) for s in self.stacks for r in s.served))

    def kernels_of(self, stack: str, arch: str | None = None) -> tuple[BuiltKernels, ...]:
        """The kernels wheels built from ``stack``'s flashinfer pin (for ``arch`` only, when given)."""
        pin = self.stack(stack).pin("flashinfer-python")
        return tuple(k for k in self.kernels if k.flashinfer == pin and arch in (None, k.arch))

    def stack(self, name: str) -> BuiltStack:
        found = self.find(name)
        if found is None:
            built = ", ".join(s.name for s in self.installable()) or "none"
            raise ManifestError(f"{self.path or FILENAME}: stack {name!r} was not built; built: {built}; "
                                f"build it with `nox -s wheels -- --stack {name}`")
        return found

    def to_json(self) -> dict[str, Any]:
        encoded = _encode(self)
        assert isinstance(encoded, dict)
        return encoded


def write(path: pathlib.Path, manifest: Manifest) -> None:
    write_atomic(path, json.dumps(manifest.to_json(), indent=2, sort_keys=True) + "\n")


def read(path: pathlib.Path) -> Manifest:
    """The manifest at ``path``; a ManifestError names the file, the entry and what is wrong."""
    fix = "rebuild it with `nox -s wheels`"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such file; run `nox -s wheels` first") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{path}: not a JSON manifest ({exc}); {fix}") from None
    written = data.get("format", FORMAT) if isinstance(data, dict) else FORMAT
    if isinstance(written, int) and written > FORMAT:
        raise ManifestError(f"{path}: format {written}, newer than this fp4graph reads ({FORMAT}); "
                            "update fp4graph or rebuild the wheels with this one")
    try:
        manifest = _decode_record(Manifest, data, "")
    except _Invalid as exc:
        raise ManifestError(f"{path}: {exc.where or 'the top level'}: {exc.what}; {fix}") from None
    return dataclasses.replace(manifest, path=path)


def read_built(wheels_dir: pathlib.Path) -> Manifest:
    """The manifest of the build in ``wheels_dir``."""
    return read(wheels_dir / FILENAME)


# --- the dataclass <-> JSON mapping, by field type ----------------------------------


def _encode(value: object) -> object:
    if isinstance(value, Pin):
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encode(getattr(value, f.name))
                for f in dataclasses.fields(value) if f.metadata.get("json", True)}
    if isinstance(value, Version):
        return str(value)
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


class _Invalid(Exception):
    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where}: {what}")
        self.where, self.what = where, what


T = TypeVar("T")


def _decode(kind: Any, value: object, where: str) -> Any:
    """``value`` (parsed JSON) as ``kind``: a record, a tuple, a mapping, a Version or a scalar."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _decode(inner, value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise _Invalid(where, f"expected a list, got {value!r}")
        return tuple(_decode(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is collections.abc.Mapping:
        if not isinstance(value, dict):
            raise _Invalid(where, f"expected an object, got {value!r}")
        return {k: _decode(args[1], v, f"{where}[{k!r}]") for k, v in value.items()}
    if kind is Pin:
        try:
            return Pin.from_json(value)
        except ValueError as exc:
            raise _Invalid(where, str(exc)) from None
    if kind is Version:
        if not isinstance(value, str):
            raise _Invalid(where, f"expected a version string, got {value!r}")
        try:
            return Version(value)
        except InvalidVersion:
            raise _Invalid(where, f"{value!r} is not a PEP 440 version") from None
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _decode_record(kind, value, where)
    if kind in (str, int) and isinstance(value, kind) and not isinstance(value, bool):
        return value
    raise _Invalid(where, f"expected {getattr(kind, '__name__', kind)}, got {value!r}")


def _decode_record(kind: type[T], value: object, where: str) -> T:
    if not isinstance(value, dict):
        raise _Invalid(where, f"expected an object, got {value!r}")
    hints = typing.get_type_hints(kind)
    given: dict[str, Any] = {}
    for f in dataclasses.fields(kind):  # type: ignore[arg-type]
        if not f.metadata.get("json", True):
            continue
        inside = f"{where}.{f.name}" if where else f.name
        if f.name in value:
            given[f.name] = _decode(hints[f.name], value[f.name], inside)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise _Invalid(where, f"no {f.name!r}")
    return kind(**given)
