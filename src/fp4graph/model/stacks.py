"""The pinned upstream artifacts and the stacks built from them (patches/stacks.toml).

The one reader of stacks.toml (:func:`read`, :func:`read_text`): the pull-request series
(:mod:`.pullrequests`), ``pin`` and every test take its tables from here.
"""

from __future__ import annotations

import dataclasses
import email.parser
import pathlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import tomllib
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .errors import ConfigError

# The stack commands use when none is named: sglang 0.5.9, the seed's release.
DEFAULT_STACK = "sglang-0.5.9"

_SHA256 = re.compile(r"[0-9a-f]{64}")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_GITHUB_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ArtifactFile:
    """One file published on the index, pinned by its sha256."""

    filename: str
    sha256: str

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")

    @property
    def project(self) -> str:
        """The canonical project name the file's name carries."""
        if self.is_wheel:
            return str(parse_wheel_filename(self.filename)[0])
        return str(parse_sdist_filename(self.filename)[0])


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SourcePin:
    """The upstream git release of an artifact: GitHub repository, tag, and the tag's commit."""

    repo: str  # owner/name on GitHub
    tag: str
    commit: str  # 40 hex digits: `git rev-parse TAG^{commit}`

    @property
    def url(self) -> str:
        return f"https://github.com/{self.repo}.git"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Artifact:
    """An upstream release we patch: its wheels (and sdist) and our series revision.

    A release the index has only as an sdist (flashinfer-python 0.4.1, pinned for sglang
    0.5.4 ... 0.5.4.post2, measured pristine) pins ``files = []`` and its ``sdist``: no stack
    may hold it (nothing to patch or serve), and its tree is the wheel built from the sdist
    (:func:`fp4graph.wheels.trees.materialize`)."""

    project: str
    version: str
    revision: int
    files: tuple[ArtifactFile, ...]
    sdist: ArtifactFile | None = None
    source: SourcePin | None = None
    # Wheels of other projects that install beside this release (flashinfer-cubin of the
    # same flashinfer release, which sglang pins), pinned for the tests: never patched,
    # built or served.
    companions: tuple[ArtifactFile, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.project}=={self.version}"

    @property
    def sdist_only(self) -> bool:
        """The index has no wheel of this release: only its sdist is pinned."""
        return not self.files

    @property
    def local_label(self) -> str:
        return f"fp4graph.{self.revision}"

    @property
    def patched_version(self) -> str:
        return f"{self.version}+{self.local_label}"

    def file(self, filename: str | None = None) -> ArtifactFile:
        """The wheel called ``filename``, or the only/first wheel."""
        if self.sdist_only:
            assert self.sdist is not None
            raise ConfigError(
                f"{self.key} pins no wheel (sdist only: {self.sdist.filename}); its tree is "
                "built from the sdist (fp4graph.wheels.trees), and no stack can serve it"
            )
        if filename is None:
            return self.files[0]
        for f in self.files:
            if f.filename == filename:
                return f
        raise ConfigError(
            f"{self.key} pins no file {filename!r}; pinned: "
            + ", ".join(f.filename for f in self.files)
        )

    def companion(self, project: str) -> ArtifactFile | None:
        """The companion wheel of ``project`` (any spelling PyPI accepts), if one is pinned."""
        wanted = canonicalize_name(project)
        return next((f for f in self.companions if f.project == wanted), None)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Stack:
    """A set of artifacts installed together (e.g. an sglang release and its flashinfer pin)."""

    name: str
    artifacts: tuple[str, ...]
    torch: str | None = None
    # A flashinfer-only stack: the pristine sglang releases it serves (each pins the
    # stack's flashinfer exactly, which X+fp4graph.N satisfies), oldest first.
    serves: tuple[str, ...] = ()


def served_name(sglang: str) -> str:
    """What the lock, pins files and install of pristine sglang ``sglang`` beside a
    flashinfer-only stack go by: ``sglang-<release>`` (never an sglang stack's name: a
    release such a stack ships is never served)."""
    return f"sglang-{sglang}"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Catalog:
    artifacts: Mapping[str, Artifact]
    stacks: tuple[Stack, ...]

    def artifact(self, project: str, version: str) -> Artifact:
        key = f"{canonicalize_name(project)}=={version}"
        try:
            return self.artifacts[key]
        except KeyError:
            raise ConfigError(
                f"{project} {version} is not pinned in patches/stacks.toml; pinned: "
                + ", ".join(sorted(self.artifacts))
            ) from None

    def stacks_by_torch(self) -> dict[str, list[str]]:
        """Each stack's torch pin -> the names of the stacks that pin it (``nox -s tracing``
        runs their tests under it), in catalog order."""
        out: dict[str, list[str]] = {}
        for stack in self.stacks:
            if stack.torch is not None:
                out.setdefault(stack.torch, []).append(stack.name)
        return out

    def stack(self, name: str) -> Stack:
        for stack in self.stacks:
            if stack.name == name:
                return stack
        raise ConfigError(
            f"no stack {name!r} in patches/stacks.toml; stacks: "
            + ", ".join(s.name for s in self.stacks)
        )

    def stack_artifacts(self, stack: Stack) -> list[Artifact]:
        return [self.artifacts[key] for key in stack.artifacts]

    def versions(self, stack: Stack) -> dict[str, str]:
        """The stack's projects -> their upstream versions."""
        return {a.project: a.version for a in self.stack_artifacts(stack)}

    def sglang_stacks(self) -> tuple[Stack, ...]:
        """The stacks that pin an sglang release (the ones installed, locked and simulated)."""
        return tuple(s for s in self.stacks if "sglang" in self.versions(s))

    def served_named(self, name: str) -> tuple[Stack, str] | None:
        """(the flashinfer-only stack, the sglang release) that :func:`served_name` ``name``
        stands for; None for any other name."""
        for stack in self.stacks:
            for release in stack.serves:
                if served_name(release) == name:
                    return stack, release
        return None

    def refuse_unserved(self, name: str) -> None:
        """Refuse to install a flashinfer-only stack ``name``: it is installed beside the
        sglang it serves, named instead."""
        found = next((s for s in self.stacks if s.name == name), None)
        if found is not None and "sglang" not in self.versions(found):
            served = [served_name(v) for v in found.serves]
            if not served:
                raise ConfigError(f"{name} has no sglang and serves no sglang release (patches/stacks.toml): "
                                  f"install a stack with sglang, e.g. {DEFAULT_STACK}")
            raise ConfigError(f"{name} has no sglang: install the sglang release it serves beside it, "
                              f"{' or '.join(served)}, e.g. `python -m fp4graph install {served[0]}`")

    def check_served_pin(self, stack: Stack, sglang: str, metadata: str, where: str) -> None:
        """Refuse ``stack`` serving ``sglang`` unless that release's wheel METADATA (text,
        read from ``where``) pins the stack's flashinfer-python exactly (``==X``, any extras,
        no marker): X+fp4graph.N satisfies only such a pin; and, where the stack names a
        torch (``nox -s tracing`` runs its cases under it), that torch exactly."""
        flashinfer = self.versions(stack).get("flashinfer-python")
        exact = exact_pins(metadata, where)
        pins = exact.get("flashinfer-python")
        if flashinfer is None or pins != flashinfer:
            found = f"pins flashinfer-python=={pins}" if pins else "pins no flashinfer-python exactly"
            raise ConfigError(
                f"patches/stacks.toml: stack {stack.name} serves sglang {sglang}, whose wheel "
                f"({where}) {found}, not the stack's {flashinfer}"
            )
        torch = exact.get("torch")
        if stack.torch is not None and torch != stack.torch:
            found = f"pins torch=={torch}" if torch else "pins no torch exactly"
            raise ConfigError(
                f"patches/stacks.toml: stack {stack.name} serves sglang {sglang}, whose wheel "
                f"({where}) {found}, not the stack's torch {stack.torch}"
            )


def exact_pins(metadata: str, where: str, environment: Mapping[str, str] | None = None) -> dict[str, str]:
    """Canonical name -> version of every ``Requires-Dist: name[extras]==X`` of a wheel's
    METADATA text (read from ``where``): those whose marker holds in ``environment`` (a
    marker environment), or with none, only those without a marker."""
    out: dict[str, str] = {}
    for raw in email.parser.Parser().parsestr(metadata).get_all("Requires-Dist") or []:
        try:
            req = Requirement(raw)
        except InvalidRequirement as exc:
            raise ConfigError(f"{where}: unreadable Requires-Dist {raw!r}: {exc}") from None
        if req.marker is not None and (environment is None or not req.marker.evaluate(dict(environment))):
            continue
        specs = list(req.specifier)
        if len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version:
            out[canonicalize_name(req.name)] = specs[0].version
    return out


def _pinned_file(raw: Any, where: str) -> tuple[ArtifactFile, str, Version]:
    """A ``{ filename, sha256 }`` entry, and the project and version its name carries."""
    if not isinstance(raw, dict) or set(raw) != {"filename", "sha256"}:
        raise ConfigError(f"{where}: each file needs exactly 'filename' and 'sha256', got {raw!r}")
    filename, sha256 = str(raw["filename"]), str(raw["sha256"]).lower()
    if not _SHA256.fullmatch(sha256):
        raise ConfigError(f"{where}: {filename}: sha256 must be 64 hex digits, got {sha256!r}")
    try:
        if filename.endswith(".whl"):
            name, file_version, _, _ = parse_wheel_filename(filename)
        else:
            name, file_version = parse_sdist_filename(filename)
    except ValueError as exc:
        raise ConfigError(f"{where}: {filename!r} is not a wheel or sdist name: {exc}") from None
    return ArtifactFile(filename=filename, sha256=sha256), str(name), file_version


def _file(raw: Any, where: str, project: str, version: str) -> ArtifactFile:
    pinned, name, file_version = _pinned_file(raw, where)
    if name != canonicalize_name(project) or file_version != Version(version):
        raise ConfigError(f"{where}: {pinned.filename!r} is not a file of {project} {version}")
    return pinned


def _companions(raw: Any, where: str, project: str) -> tuple[ArtifactFile, ...]:
    """The ``companions`` list: wheels of other projects, one per project."""
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: companions must be a list of {{ filename, sha256 }}, got {raw!r}")
    out: list[ArtifactFile] = []
    for entry in raw:
        pinned, name, _ = _pinned_file(entry, where)
        if not pinned.is_wheel:
            raise ConfigError(f"{where}: companion {pinned.filename!r} is not a wheel")
        if name == canonicalize_name(project) or name in (f.project for f in out):
            raise ConfigError(
                f"{where}: companion {pinned.filename!r}: pin one wheel per other project "
                f"(the artifact's own files go in 'files')"
            )
        out.append(pinned)
    return tuple(out)


def _source(raw: Any, where: str, project: str, version: str) -> SourcePin:
    keys = {"repo", "tag", "commit"}
    if not isinstance(raw, dict) or set(raw) != keys:
        raise ConfigError(
            f"{where}: source needs exactly 'repo', 'tag' and 'commit' "
            f'(e.g. {{ repo = "owner/name", tag = "v{version}", commit = "<40 hex>" }}), got {raw!r}'
        )
    repo, tag, commit = str(raw["repo"]), str(raw["tag"]), str(raw["commit"])
    if not _GITHUB_REPO.fullmatch(repo):
        raise ConfigError(f"{where}: source repo must be a GitHub 'owner/name', got {repo!r}")
    if not tag or tag != tag.strip() or version not in tag:
        raise ConfigError(f"{where}: source tag {tag!r} does not name {project} {version}")
    if not _COMMIT.fullmatch(commit):
        raise ConfigError(
            f"{where}: source commit of {tag} must be 40 lowercase hex digits "
            f"(git rev-parse {tag}^{{commit}}), got {commit!r}"
        )
    return SourcePin(repo=repo, tag=tag, commit=commit)


def parse(data: Mapping[str, Any], source: str = "patches/stacks.toml") -> Catalog:
    artifacts: dict[str, Artifact] = {}
    for i, raw in enumerate(data.get("artifact", [])):
        where = f"{source}: artifact #{i + 1}"
        try:
            project = canonicalize_name(str(raw["project"]))
            version = str(raw["version"])
            revision = int(raw["revision"])
            files_raw: Sequence[Any] = raw["files"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: needs project, version, revision and files ({exc})") from None
        try:
            Version(version)
        except InvalidVersion:
            raise ConfigError(f"{where}: {version!r} is not a PEP 440 version") from None
        if "+" in version:
            raise ConfigError(f"{where}: pin the upstream version {version!r} without a local label")
        if revision < 1:
            raise ConfigError(f"{where}: revision must be >= 1, got {revision}")
        files = tuple(_file(f, where, project, version) for f in files_raw)
        sdist = _file(raw["sdist"], where, project, version) if "sdist" in raw else None
        if not all(f.is_wheel for f in files) or not (files or sdist):
            raise ConfigError(f"{where}: 'files' must list the wheels to patch "
                              "(empty only with an 'sdist', for a release the index has no wheel of)")
        if sdist is not None and sdist.is_wheel:
            raise ConfigError(f"{where}: sdist {sdist.filename!r} is a wheel")
        pin = _source(raw["source"], where, project, version) if "source" in raw else None
        companions = _companions(raw["companions"], where, project) if "companions" in raw else ()
        artifact = Artifact(
            project=project, version=version, revision=revision, files=files, sdist=sdist,
            source=pin, companions=companions,
        )
        if artifact.key in artifacts:
            raise ConfigError(f"{where}: {artifact.key} is pinned twice")
        artifacts[artifact.key] = artifact

    stacks = []
    for i, raw in enumerate(data.get("stack", [])):
        where = f"{source}: stack #{i + 1}"
        name = str(raw.get("name", ""))
        keys = []
        for req in raw.get("artifacts", []):
            req_project, _, req_version = str(req).partition("==")
            key = f"{canonicalize_name(req_project)}=={req_version}"
            if key not in artifacts:
                raise ConfigError(f"{where} ({name}): {req!r} is not a pinned artifact")
            if artifacts[key].sdist_only:
                raise ConfigError(f"{where} ({name}): {req!r} pins only an sdist: a stack serves "
                                  "patched wheels (pin a release that has a wheel)")
            keys.append(key)
        if not name or not keys:
            raise ConfigError(f"{where}: needs a name and at least one artifact")
        torch = raw.get("torch")
        if torch is not None:
            try:
                Version(str(torch))
            except InvalidVersion:
                raise ConfigError(f"{where} ({name}): torch {torch!r} is not a version") from None
        serves = _serves(raw.get("serves", []), f"{where} ({name})", keys)
        stacks.append(
            Stack(name=name, artifacts=tuple(keys), torch=None if torch is None else str(torch),
                  serves=serves)
        )
    _check_served_once(stacks, source)
    return Catalog(artifacts=artifacts, stacks=tuple(stacks))


def _serves(raw: Any, where: str, keys: Sequence[str]) -> tuple[str, ...]:
    """A stack's ``serves``: sglang releases, oldest first, on a stack without an sglang."""
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise ConfigError(f'{where}: serves must be a list of sglang releases (e.g. ["0.5.16"]), got {raw!r}')
    if raw and any(k.startswith("sglang==") for k in keys):
        raise ConfigError(f"{where}: serves is for flashinfer-only stacks; an sglang stack serves its own sglang")
    try:
        versions = [Version(v) for v in raw]
    except InvalidVersion as exc:
        raise ConfigError(f"{where}: serves: {exc}") from None
    if any("+" in v for v in raw) or versions != sorted(set(versions)):
        raise ConfigError(f"{where}: serves must list released sglang versions once each, oldest first, got {raw!r}")
    return tuple(raw)


def _check_served_once(stacks: Sequence[Stack], source: str) -> None:
    """A pristine sglang release is served by one flashinfer-only stack, and never one an
    sglang stack ships patched."""
    owner: dict[str, str] = {}
    for stack in stacks:
        for key in stack.artifacts:
            if key.startswith("sglang=="):
                owner[key.removeprefix("sglang==")] = stack.name
    for stack in stacks:
        for release in stack.serves:
            if release in owner:
                raise ConfigError(
                    f"{source}: stack {stack.name} serves sglang {release}, which "
                    f"{owner[release]} already serves"
                )
            owner[release] = stack.name


def read_text(text: str, source: str = "patches/stacks.toml") -> dict[str, Any]:
    """The tables of a stacks.toml text (or of a block of one); ``source`` names it in errors."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def read(path: pathlib.Path) -> dict[str, Any]:
    """The tables of the stacks.toml at ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    return read_text(text, str(path))


def load(path: pathlib.Path) -> Catalog:
    return parse(read(path), str(path))
