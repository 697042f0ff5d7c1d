"""Build the patched wheels of the selected stacks into ``wheels/``, all or nothing.

Everything is written to a staging directory beside ``wheels/`` and swapped into
place at the end, so a failed or interrupted build leaves ``wheels/`` as it was.
"""

from __future__ import annotations

import calendar
import dataclasses
import hashlib
import importlib.metadata
import pathlib
import shutil
import tempfile
from collections.abc import Sequence

from packaging.version import Version

from .. import __version__
from ..model import locks, manifest, projects
from ..model.config import Settings
from ..model.errors import BuildError, PatchError
from ..model.files import atomic_directory, recover, sha256_of
from ..model.log import log
from ..model.manifest import (
    BuiltArtifact,
    BuiltKernels,
    BuiltServed,
    BuiltStack,
    BuiltWheel,
    Manifest,
    ManifestError,
    PatchRecord,
    Pin,
    PublishedLock,
    SeriesRecord,
)
from ..model.series import Series, load_series
from ..model.stacks import Artifact, ArtifactFile, Catalog, load, served_name
from ..platforms.overrides import platform_pins
from ..platforms.targets import LINUX_X86_64, PLATFORMS
from . import apply, repack, trees
from .fetch import fetch
from .index import write_index, write_metadata_files
from .repack import pack
from .trees import build_tree

# Zip timestamps of a series without a Last-Update date (2026-01-01).
DEFAULT_EPOCH = 1767225600


def source_date_epoch(series: Series) -> int:
    """Zip timestamps for a series: midnight UTC of its newest Last-Update."""
    day = series.last_update
    return calendar.timegm(day.timetuple()) if day else DEFAULT_EPOCH


def _engine_digest() -> str:
    """What else decides a wheel's bytes: the engine code that builds it and ``wheel``."""
    h = hashlib.sha256(importlib.metadata.version("wheel").encode())
    for module in (apply, repack, trees, projects):
        h.update(pathlib.Path(str(module.__file__)).read_bytes())
    return h.hexdigest()


def _build_key(artifact: Artifact, pinned: ArtifactFile, series: Series) -> str:
    parts = [pinned.sha256, series.digest, artifact.patched_version, str(source_date_epoch(series))]
    return hashlib.sha256("\0".join([*parts, _engine_digest()]).encode()).hexdigest()[:32]


def _build_wheel(
    settings: Settings, artifact: Artifact, pinned: ArtifactFile, series: Series, work: pathlib.Path
) -> pathlib.Path:
    """The patched wheel for ``pinned``, from the build cache or built into it.

    Builds are reproducible, so a wheel built from the same inputs by the same
    engine is reused byte for byte.
    """
    cached = settings.cache_dir / "built" / _build_key(artifact, pinned, series)
    wheels = sorted(cached.glob("*.whl"))
    if len(wheels) == 1:
        recorded = wheels[0].with_name(wheels[0].name + ".sha256")
        if recorded.exists() and recorded.read_text().strip() == sha256_of(wheels[0]):
            return wheels[0]
        log(f"rebuild {wheels[0].name}: the cached copy does not match its recorded sha256")
        shutil.rmtree(cached)
    wheel = fetch(settings, artifact.project, pinned)
    tree = pathlib.Path(tempfile.mkdtemp(dir=work, prefix="tree-"))
    build_tree(artifact, wheel, series, tree)
    # replace=False: a concurrent build may have won; either is the same.
    with atomic_directory(cached, replace=False) as staging:
        result = pack(tree, staging, source_date_epoch(series))
        shutil.rmtree(tree)
        result.with_name(result.name + ".sha256").write_text(sha256_of(result) + "\n")
    return cached / result.name


def patched_wheel(settings: Settings, artifact: Artifact, pinned: ArtifactFile) -> pathlib.Path:
    """The patched wheel of one pinned file, from the build cache or built into it."""
    series = load_series(settings.patches_dir, artifact.project, artifact.version)
    if series is None:
        raise BuildError(f"{artifact.key} has no series in patches/{artifact.project}/{artifact.version}/")
    settings.cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=settings.cache_dir, prefix=".work-") as work:
        return _build_wheel(settings, artifact, pinned, series, pathlib.Path(work))


def _build_artifact(
    settings: Settings, artifact: Artifact, series: Series, out: pathlib.Path, work: pathlib.Path
) -> list[BuiltWheel]:
    built = []
    for pinned in artifact.files:
        source = _build_wheel(settings, artifact, pinned, series, work)
        result = out / source.name
        shutil.copyfile(source, result)
        log(f"built {result.name}")
        built.append(BuiltWheel(filename=result.name, sha256=sha256_of(result),
                                upstream_filename=pinned.filename, upstream_sha256=pinned.sha256))
    return built


def _series_record(artifact: Artifact, series: Series) -> SeriesRecord:
    return SeriesRecord(
        path=f"patches/{artifact.project}/{artifact.version}/series",
        sha256=series.digest,
        patches=tuple(PatchRecord(name=p.name, subject=p.subject, sha256=sha256_of(p.path))
                      for p in series.patches),
    )


def _manifest(
    catalog: Catalog,
    stack_names: Sequence[str],
    series_of: dict[str, Series | None],
    built: dict[str, list[BuiltWheel]],
    published_locks: dict[str, PublishedLock],
) -> Manifest:
    artifacts = {}
    for key, series in series_of.items():
        artifact = catalog.artifacts[key]
        artifacts[key] = BuiltArtifact(
            project=artifact.project,
            upstream_version=artifact.version,
            version=Version(artifact.patched_version if series else artifact.version),
            upstream_files=artifact.files,
            series=None if series is None else _series_record(artifact, series),
            wheels=tuple(built.get(key, [])),
        )
    stacks = tuple(
        BuiltStack(name=name, artifacts=catalog.stack(name).artifacts,
                   pins=tuple(artifacts[k].pin for k in catalog.stack(name).artifacts),
                   lock=published_locks.get(name),
                   served=tuple(BuiltServed(sglang=v, lock=published_locks.get(served_name(v)))
                                for v in catalog.stack(name).serves))
        for name in stack_names
    )
    return Manifest(fp4graph=__version__, stacks=stacks, artifacts=artifacts)


def _publish_locks(settings: Settings, stack_names: Sequence[str], staging: pathlib.Path) -> dict[str, PublishedLock]:
    """Copy each stack's lock (patches/locks/<stack>.txt, read to refuse a broken one), and
    those of the sglang releases a flashinfer-only stack serves (sglang-<release>.txt), to
    ``locks/`` beside the index, for the manifest."""
    catalog = load(settings.stacks_file)
    out = {}
    for name in [*stack_names, *(served_name(v) for n in stack_names
                                 for v in catalog.stack(n).serves)]:
        source = locks.lock_path(settings.patches_dir, name)
        if not source.is_file():
            continue
        locks.read(source, name)
        target = staging / locks.LOCKS_DIR / source.name
        target.parent.mkdir(exist_ok=True)
        shutil.copyfile(source, target)
        out[name] = PublishedLock(path=f"{locks.LOCKS_DIR}/{source.name}", sha256=sha256_of(target))
    return out


def pins_file(stack: str, platform: str | None = None) -> str:
    """The published requirements file of ``stack``'s own pins (for ``platform``:
    linux-aarch64's adds the CUDA torch build where PyPI's is a CPU one), relative to wheels/."""
    return f"{locks.LOCKS_DIR}/{stack}{'.' + platform if platform else ''}.pins.txt"


def overrides_file(stack: str, platform: str) -> str:
    """The published ``uv --override`` file of ``stack`` on ``platform``, relative to wheels/."""
    return f"{locks.LOCKS_DIR}/{stack}.{platform}.overrides.txt"


def _publish_install_files(settings: Settings, built: Manifest, staging: pathlib.Path) -> list[str]:
    """Per stack with a lock, what one install command needs beside the lock and only the
    index URL (no checkout): its pins as a requirements file, and per platform the pins plus
    the builds from their own index (torch's, sgl-kernel's) and the overrides
    (patches/locks/platforms.toml)."""
    written = []
    for stack in built.installable():
        name = stack.name
        if stack.lock is None:
            continue
        own = [p.requirement for p in stack.pins]
        files = {pins_file(name): ("", own)}
        for target in PLATFORMS.values():
            if target == LINUX_X86_64:
                continue
            extra = platform_pins(settings.patches_dir / locks.LOCKS_DIR, name, target)
            files[pins_file(name, target.name)] = (f" on {target.name}",
                                                   own + [b.requirement for b in extra.indexed])
            files[overrides_file(name, target.name)] = (
                f" on {target.name} (uv --override)", [o.requirement for o in extra.overrides])
        for path, (where, lines) in files.items():
            kind = "overrides" if path.endswith("overrides.txt") else "pins"
            (staging / path).write_text(f"# fp4graph {kind} of stack {name}{where}\n"
                                        + "".join(line + "\n" for line in lines))
            written.append(path)
    return written


def built_pins(wheels_dir: pathlib.Path, stack: str) -> list[str]:
    """The requirements that install ``stack`` as built (from ``wheels_dir/manifest.json``)."""
    return [p.requirement for p in manifest.read_built(wheels_dir).stack(stack).pins]


def pins(
    settings: Settings, stack: str, *, project: str | None = None, torch: bool = False, kernels: str | None = None
) -> tuple[Pin, ...]:
    """The exact pins of ``stack`` as built (only ``project``'s, when given), and with
    ``torch`` the stack's torch pin from patches/stacks.toml (when it has one); with
    ``kernels`` (an arch, ``12.0a``) the flashinfer-jit-cache wheel ``nox -s kernels`` built
    for it."""
    built = manifest.read_built(settings.wheels_dir)
    found = tuple(p for p in built.stack(stack).pins if project is None or p.project == project)
    if kernels is not None:
        # One version per arch: its wheels of several platforms (x86_64, aarch64) share the pin.
        matches = tuple({k.pin: k for k in built.kernels_of(stack, kernels)}.values())
        if len(matches) != 1:
            have = ", ".join(k.filename for k in built.kernels_of(stack)) or "none"
            raise ManifestError(f"{built.path}: {len(matches)} kernels wheels of {stack} for {kernels} "
                                f"(built: {have}); build it with `nox -s kernels -- {stack} --arch {kernels}`")
        found = (*found, matches[0].pin)
    version = load(settings.stacks_file).stack(stack).torch if torch else None
    return (*found, Pin(project="torch", version=Version(version))) if version else found


def build(settings: Settings, stack_names: Sequence[str] | None = None) -> Manifest:
    """Build every selected stack's patched wheels; return the manifest written."""
    catalog = load(settings.stacks_file)
    names = list(stack_names) if stack_names else [s.name for s in catalog.stacks]
    keys = list(dict.fromkeys(k for n in names for k in catalog.stack(n).artifacts))
    series_of = {
        k: load_series(settings.patches_dir, catalog.artifacts[k].project, catalog.artifacts[k].version)
        for k in keys
    }
    # Every series that lacks a fix, named before anything is fetched or built.
    refused = [r for series in series_of.values() if series for r in series.refusals()]
    if refused:
        raise PatchError("refusing to build a +fp4graph wheel from a series that lacks a fix:\n  "
                         + "\n  ".join(refused))

    wheels_dir = settings.wheels_dir
    recover(wheels_dir)
    with atomic_directory(wheels_dir, replace=True) as staging:
        work = staging / ".work"
        work.mkdir()
        built: dict[str, list[BuiltWheel]] = {}
        for key, series in series_of.items():
            if series is None:
                log(f"skip {key}: no series in patches/")
                continue
            built[key] = _build_artifact(settings, catalog.artifacts[key], series, staging, work)
        shutil.rmtree(work)

        # What is not build output stays: the README and reports of other sessions.
        readme, reports = wheels_dir / "README.md", wheels_dir / "reports"
        if readme.exists():
            shutil.copy2(readme, staging / "README.md")
        if reports.is_dir():
            shutil.copytree(reports, staging / "reports", symlinks=True)
        kernels = _carry_kernels(wheels_dir, staging, built)
        write_metadata_files(staging)
        write_index(staging)
        published = _publish_locks(settings, names, staging)
        written = dataclasses.replace(_manifest(catalog, names, series_of, built, published), kernels=kernels)
        install_files = _publish_install_files(settings, written, staging)
        sums = [f"{w.sha256}  {w.filename}\n" for ws in built.values() for w in ws]
        sums += [f"{lock.sha256}  {lock.path}\n" for lock in published.values()]
        sums += [f"{sha256_of(staging / path)}  {path}\n" for path in install_files]
        sums += [f"{k.sha256}  {k.filename}\n" for k in kernels]
        (staging / "SHA256SUMS").write_text("".join(sorted(sums, key=lambda s: s[66:])))
        manifest.write(staging / manifest.FILENAME, written)
    return written


def _carry_kernels(
    wheels_dir: pathlib.Path, staging: pathlib.Path, built: dict[str, list[BuiltWheel]]
) -> tuple[BuiltKernels, ...]:
    """The kernels wheels (``nox -s kernels``) of the previous build that were built from a
    flashinfer wheel this build made again, byte for byte: copied into ``staging``."""
    try:
        previous = manifest.read_built(wheels_dir)
    except ManifestError:
        return ()
    rebuilt = {w.sha256 for ws in built.values() for w in ws}
    kept = []
    for kernels in previous.kernels:
        source = wheels_dir / kernels.filename
        if kernels.flashinfer_sha256 in rebuilt and source.exists() and sha256_of(source) == kernels.sha256:
            shutil.copyfile(source, staging / kernels.filename)
            kept.append(kernels)
        else:
            log(f"drop {kernels.filename}: its {kernels.flashinfer.requirement} was not built again as it was")
    return tuple(kept)
