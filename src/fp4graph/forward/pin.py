"""``python -m fp4graph pin PROJECT VERSION``: pin a release from the index into patches/stacks.toml.

Reads the project's page of the index (PEP 691 JSON, PEP 503 HTML as a fallback; PyPI
unless ``--index-url``) and writes, with the index's sha256 of each file:

- the ``[[artifact]]`` entry: every file a stack serves: the pure wheel, or one wheel per
  CPython of :data:`CPYTHONS` and linux machine, x86_64 then aarch64 (sglang >= 0.5.11
  ships a compiled extension), and the sdist;
- the same for every project fp4graph patches that the release pins exactly in its own
  wheel METADATA (sglang's ``flashinfer_python==X``), unless already pinned;
- a ``[[stack]]`` ``<prefix>-<version>`` of those, with the ``torch`` the release pins;
- the ``source`` pin (GitHub repo, tag ``v<version>``, commit) where the wheel records the
  commit it was built from (flashinfer's ``_build_meta.py``); ``nox -s suites`` checks that
  the tag names that commit before it runs anything.

A release pinned without a stack (``--no-stack``: measured, nothing served) may pin a
project the index has only as an sdist (sglang 0.5.4's flashinfer-python 0.4.1): its entry
is ``files = []`` and the sdist, whose ``_build_meta.py`` gives the source pin.

The file is edited as text: existing lines, comments and order stay as they are; each
new block goes beside its project's releases in version order.  The result is re-read
and must hold every old entry unchanged.  A version pinned with other files or hashes
is refused, never overwritten.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib
import tarfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Sequence

from packaging.markers import default_environment
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..model import projects, stacks
from ..model.config import Settings
from ..model.errors import ConfigError, FetchError, Fp4graphError
from ..model.files import write_atomic
from ..model.log import log
from ..model.stacks import Artifact, ArtifactFile, Catalog, SourcePin, parse, read_text
from ..platforms.targets import LINUX_X86_64, PLATFORMS
from ..wheels.fetch import IndexFile, fetch, index_files

# The CPythons a stack serves when a release ships per-interpreter wheels: each of
# REQUIRED_CPYTHONS must have a linux x86_64 wheel; every linux wheel the release has for
# these CPythons and PLATFORMS' machines (aarch64: DGX Spark) is pinned too.
REQUIRED_CPYTHONS = ("cp310", "cp311", "cp312")
CPYTHONS = (*REQUIRED_CPYTHONS, "cp313")
# A release pinned without a stack (measured only: nothing served) needs one linux x86_64
# CPython wheel of these (sglang 0.5.22+ publish no cp310).
MEASURED_CPYTHONS = ("cp311", "cp312")


class PinError(Fp4graphError):
    """A release cannot be pinned as asked (missing files, a conflicting pin, ...)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Pinned:
    """What ``pin`` wrote (or found already there)."""

    artifacts: tuple[Artifact, ...]
    existing: tuple[str, ...]  # artifact keys that were already pinned, identically
    stack: str | None
    torch: str | None
    stacks_file: pathlib.Path


def _version_of(filename: str) -> tuple[str, Version] | None:
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
        elif filename.endswith(".tar.gz"):
            name, version = parse_sdist_filename(filename)
        else:
            return None
    except (ValueError, InvalidVersion):
        return None
    return str(name), version


def release_files(files: Sequence[IndexFile], project: str, version: str, where: str,
                  required: Sequence[str] = REQUIRED_CPYTHONS) -> tuple[list[IndexFile], IndexFile | None]:
    """The wheels a stack serves and the sdist, from the index's files of ``project``;
    ``required``: the CPythons that must have a linux x86_64 wheel (all of them), or for a
    measure-only pin :data:`MEASURED_CPYTHONS` (any one of them)."""
    wanted = (canonicalize_name(project), Version(version))
    mine = [f for f in files if _version_of(f.filename) == wanted]
    if not mine:
        raise PinError(f"{where}: {project} has no files for version {version!r}")
    yanked = [f for f in mine if f.yanked is not None]
    if yanked:
        raise PinError(f"{where}: {', '.join(f.filename for f in yanked)} is yanked "
                       f"({yanked[0].yanked or 'no reason given'}); pin another release")
    unhashed = [f.filename for f in mine if not f.sha256]
    if unhashed:
        raise PinError(f"{where}: the index gives no sha256 for {', '.join(unhashed)}")
    wheels = [f for f in mine if f.filename.endswith(".whl")]
    pure = [f for f in wheels if f.filename.endswith("-py3-none-any.whl")]
    sdist = next((f for f in mine if f.filename.endswith(".tar.gz")), None)
    if pure:
        return pure[:1], sdist
    if not wheels and sdist is not None and required is MEASURED_CPYTHONS:
        return [], sdist  # sdist only: measured from the wheel built from it, never served
    chosen = []
    for target in PLATFORMS.values():
        for cp in CPYTHONS:
            fits = sorted(f.filename for f in wheels
                          if f"-{cp}-{cp}-" in f.filename and target.accepts(f.filename))
            if fits:
                chosen.append(next(f for f in wheels if f.filename == fits[-1]))
            elif target is LINUX_X86_64 and cp in required and required is not MEASURED_CPYTHONS:
                raise _missing(where, project, version, cp, wheels)
    if required is MEASURED_CPYTHONS and not any(
            LINUX_X86_64.accepts(f.filename) and f"-{cp}-{cp}-" in f.filename for f in chosen for cp in required):
        raise _missing(where, project, version, " or ".join(required), wheels)
    return chosen, sdist


def _missing(where: str, project: str, version: str, cp: str, wheels: Sequence[IndexFile]) -> PinError:
    return PinError(f"{where}: {project} {version} has no pure wheel and no {cp} x86_64 Linux wheel; "
                    f"its wheels: {', '.join(f.filename for f in wheels) or 'none'}")


def _metadata(settings: Settings, project: str, wheel: IndexFile) -> str:
    """The wheel's METADATA: the index's PEP 658 file when it has one, else from the wheel."""
    if wheel.metadata_sha256:
        try:
            with urllib.request.urlopen(wheel.url + ".metadata", timeout=60) as response:
                data = response.read()
        except (urllib.error.URLError, OSError) as exc:
            raise FetchError(f"{wheel.url}.metadata: download failed: {exc}") from None
        if hashlib.sha256(data).hexdigest() != wheel.metadata_sha256:
            raise FetchError(f"{wheel.url}.metadata: sha256 differs from the index's")
        return bytes(data).decode("utf-8")
    assert wheel.sha256 is not None
    path = fetch(settings, project, ArtifactFile(filename=wheel.filename, sha256=wheel.sha256))
    with zipfile.ZipFile(path) as zf:
        names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if len(names) != 1:
            raise PinError(f"{path}: expected one .dist-info/METADATA, found {names or 'none'}")
        return zf.read(names[0]).decode("utf-8")


def exact_pins(metadata: str, where: str) -> dict[str, str]:
    """Canonical name -> version of every ``Requires-Dist: name==version`` that applies on
    this platform without extras."""
    env = {**{k: str(v) for k, v in default_environment().items()}, "extra": ""}
    return stacks.exact_pins(metadata, where, env)


# --- stacks.toml, edited as text --------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Block:
    kind: str  # "artifact" | "stack"
    start: int  # first line (its leading comments included)
    head: int  # the [[kind]] line
    project: str
    version: Version


def _blocks(lines: list[str]) -> list[_Block]:
    heads = [i for i, line in enumerate(lines) if line.strip() in ("[[artifact]]", "[[stack]]")]
    starts = []
    for i in heads:
        start = i
        while start > 0 and lines[start - 1].lstrip().startswith("#"):
            start -= 1
        starts.append(start)
    blocks = []
    for n, (head, start) in enumerate(zip(heads, starts, strict=True)):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        kind = lines[head].strip()[2:-2]
        data = read_text("".join(lines[start:end]))[kind][0]
        if kind == "artifact":
            project, version = str(data["project"]), str(data["version"])
        else:
            first = str(data["artifacts"][0])
            project, _, version = first.partition("==")
        blocks.append(_Block(kind, start, head, canonicalize_name(project), Version(version)))
    return blocks


def _insert_at(lines: list[str], blocks: list[_Block], kind: str, project: str, version: Version) -> int:
    """The line a new ``kind`` block of ``project`` ``version`` goes before."""
    same_kind = [b for b in blocks if b.kind == kind]
    same = [b for b in same_kind if b.project == project]
    later = [b for b in same if b.version > version]
    if later:
        # The comment above the first block of a kind speaks for the section: stay below it.
        return later[0].head if later[0] is same_kind[0] else later[0].start
    anchor = same[-1] if same else (same_kind[-1] if same_kind else None)
    if anchor is None:
        if kind == "artifact":
            stacks = [b for b in blocks if b.kind == "stack"]
            return stacks[0].start if stacks else len(lines)
        return len(lines)
    following = [b for b in blocks if b.start > anchor.start]
    return following[0].start if following else len(lines)


def _artifact_block(artifact: Artifact) -> str:
    out = []
    if len(artifact.files) > 1:
        out.append(f"# {artifact.version} ships one wheel per CPython: every one we serve is "
                   "pinned and repacked on its own.\n")
    if artifact.sdist_only:
        out.append(f"# {artifact.version}: the index has no wheel, only the sdist: measured pristine from\n"
                   "# the wheel built from it; no stack can serve it.\n")
    out += ["[[artifact]]\n", f'project = "{artifact.project}"\n', f'version = "{artifact.version}"\n',
            f"revision = {artifact.revision}\n"]
    if artifact.sdist_only:
        out.append("files = []\n")
    else:
        out.append("files = [\n")
        out += [f'    {{ filename = "{f.filename}", sha256 = "{f.sha256}" }},\n' for f in artifact.files]
        out.append("]\n")
    if artifact.sdist is not None:
        out.append(f'sdist = {{ filename = "{artifact.sdist.filename}", sha256 = "{artifact.sdist.sha256}" }}\n')
    if artifact.source is not None:
        s = artifact.source
        out.append(f'source = {{ repo = "{s.repo}", tag = "{s.tag}", commit = "{s.commit}" }}\n')
    return "".join(out)


def _stack_block(name: str, keys: Sequence[str], torch: str | None) -> str:
    out = ["[[stack]]\n", f'name = "{name}"\n',
           "artifacts = [" + ", ".join(f'"{k}"' for k in keys) + "]\n"]
    if torch:
        out.append(f'torch = "{torch}"\n')
    return "".join(out)


def insert_blocks(text: str, artifacts: Sequence[Artifact], stack: str | None,
                  stack_keys: Sequence[str], torch: str | None) -> str:
    """``text`` with the new blocks inserted (each followed by a blank line)."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    new: list[tuple[str, str, Version, str]] = [
        ("artifact", a.project, Version(a.version), _artifact_block(a)) for a in artifacts
    ]
    if stack is not None:
        first_project, _, first_version = stack_keys[0].partition("==")
        new.append(("stack", first_project, Version(first_version),
                    _stack_block(stack, stack_keys, torch)))
    for kind, project, version, block in new:
        blocks = _blocks(lines)
        at = _insert_at(lines, blocks, kind, project, version)
        chunk = block.splitlines(keepends=True) + ["\n"]
        if at == len(lines) and lines and lines[-1].strip():
            chunk = ["\n", *chunk[:-1]]
        lines[at:at] = chunk
    return "".join(lines)


def _check_kept(old: Catalog, new: Catalog, where: pathlib.Path) -> None:
    for key, artifact in old.artifacts.items():
        if new.artifacts.get(key) != artifact:
            raise ConfigError(f"{where}: pin would change {key}; nothing written")
    if not set(old.stacks) <= set(new.stacks):
        raise ConfigError(f"{where}: pin would change a stack; nothing written")


# --- the command -------------------------------------------------------------------------


def pinned_member(path: pathlib.Path, member: str) -> bytes | None:
    """``member`` (a path inside the installed package) of a wheel, or of an sdist (under
    its one top directory); None where it has none."""
    if path.name.endswith(".whl"):
        with zipfile.ZipFile(path) as zf:
            try:
                return zf.read(member)
            except KeyError:
                return None
    with tarfile.open(path) as tf:
        top = path.name.removesuffix(".tar.gz")
        try:
            extracted = tf.extractfile(f"{top}/{member}")
        except KeyError:
            return None
        return extracted.read() if extracted is not None else None


def _source_pin(settings: Settings, project: str, version: str, file: ArtifactFile) -> SourcePin | None:
    """The commit the wheel (or the sdist) records it was built from, as a pin of tag v<version>."""
    entry = projects.get(project)
    if entry.source_commit is None:
        return None
    member, pattern = entry.source_commit
    data = pinned_member(fetch(settings, project, file), member)
    found = pattern.search(data.decode("utf-8", "replace")) if data is not None else None
    if found is None:
        log(f"pin: {file.filename} records no commit in {member}: no source pin")
        return None
    return SourcePin(repo=entry.github, tag=f"v{version}", commit=found[1])


def _artifact_for(settings: Settings, project: str, version: str,
                  required: Sequence[str] = REQUIRED_CPYTHONS) -> tuple[Artifact, list[IndexFile]]:
    where = f"{settings.index_url.rstrip('/')}/{canonicalize_name(project)}/"
    wheels, sdist = release_files(index_files(settings.index_url, project), project, version, where, required)
    files = tuple(ArtifactFile(filename=f.filename, sha256=str(f.sha256)) for f in wheels)
    sd = ArtifactFile(filename=sdist.filename, sha256=str(sdist.sha256)) if sdist else None
    recorded = files[0] if files else sd
    assert recorded is not None
    return Artifact(project=canonicalize_name(project), version=version, revision=1, files=files,
                    sdist=sd, source=_source_pin(settings, project, version, recorded)), wheels


def pin(settings: Settings, project: str, version: str, *, stack: bool = True) -> Pinned:
    """Pin ``project`` ``version`` (and the releases it pins of projects we patch) from
    the index into ``settings.stacks_file``; with ``stack``, add its stack."""
    project = projects.get(project).name
    path = settings.stacks_file
    text = path.read_text(encoding="utf-8")
    old = parse(read_text(text, str(path)), str(path))
    artifact, wheels = _artifact_for(settings, project, version, REQUIRED_CPYTHONS if stack else MEASURED_CPYTHONS)
    if not wheels:
        raise PinError(f"{settings.index_url}: {project} {version} has only an sdist: its wheel "
                       "METADATA (the pins) cannot be read; pin a release that has a wheel")
    log(f"pin: {artifact.key}: {', '.join(f.filename for f in artifact.files)}")
    pins = exact_pins(_metadata(settings, project, wheels[0]), wheels[0].filename)
    wanted = [artifact]
    for dep in projects.NAMES:
        if dep != project and dep in pins:
            wanted.append(_artifact_for(settings, dep, pins[dep], REQUIRED_CPYTHONS if stack else MEASURED_CPYTHONS)[0])
    torch = pins.get("torch")
    written, existing = [], []
    for a in wanted:
        have = old.artifacts.get(a.key)
        if have is None:
            written.append(a)
        elif (have.files, have.sdist) == (a.files, a.sdist):
            existing.append(a.key)
        else:
            raise PinError(
                f"{path}: {a.key} is already pinned with other files or hashes than "
                f"{settings.index_url} serves; compare them by hand (nothing written)"
            )
    name = f"{projects.get(project).stack_prefix}-{version}" if stack else None
    keys = [a.key for a in wanted]
    if name is not None:
        present = [s for s in old.stacks if s.name == name]
        if present and (list(present[0].artifacts), present[0].torch) != (keys, torch):
            raise PinError(f"{path}: stack {name!r} exists with other artifacts or torch; "
                           "edit it by hand (nothing written)")
        if present:
            name = None
    new_text = insert_blocks(text, written, name, keys, torch)
    try:
        new = parse(read_text(new_text, str(path)), str(path))
    except ConfigError as exc:
        raise ConfigError(f"{path}: pin would write a file that does not load ({exc}); "
                          "nothing written") from None
    _check_kept(old, new, path)
    if new_text != text:
        write_atomic(path, new_text)
    return Pinned(artifacts=tuple(written), existing=tuple(existing), stack=name, torch=torch,
                  stacks_file=path)
