"""Prebuilt FlashInfer fp4 modules: flashinfer-jit-cache wheels beside a stack's patched flashinfer.

    targets (archs, kinds, the wheel's version) + toolchain (nvcc, c++, tvm-ffi)
      -> compile (worker.py in a child interpreter, per arch, cached by content)
      -> package (the wheel) -> outdir (wheels/: the index, SHA256SUMS, manifest.json)
    exchange: the compiled modules as parts to carry from a machine with cores, and back

``nox -s kernels`` (:func:`build`) builds them here; where the cores are elsewhere (a GPU
machine without network), ``--export DIR`` writes what a local ``--import DIR`` packages.
``--platform linux-aarch64`` (a DGX Spark's) on x86_64 compiles the host code with the
aarch64 cross compiler (:mod:`.cross`); every module's ELF machine is checked before packing.
FlashInfer 0.6.x loads ``flashinfer_jit_cache.get_jit_cache_dir()/<name>/<name>.so`` in
place of a JIT build (``JitSpec.is_aot``); 0.7.x's provider packages are not built here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import pathlib
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence

from packaging.version import Version

from ...model import manifest
from ...model.config import Settings
from ...model.files import atomic_directory, sha256_of
from ...model.log import log
from ...model.manifest import BuiltKernels, KernelModule
from ...model.series import load_series
from ...model.stacks import Artifact, load
from .. import build as wheels_build
from ..fetch import fetch
from ..repack import unpack
from . import compile, cross, elf, exchange, outdir, package, targets, toolchain
from .compile import ArchBuild
from .cross import Platform
from .targets import Arch, KernelsError

__all__ = ["KernelOptions", "KernelsError", "KernelsOutcome", "build", "check_machine", "requirements"]

FLASHINFER = "flashinfer-python"
# Where every kernels build runs, whatever the checkout and the cache: the bytes nvcc writes
# depend on the sources' paths (compile.py).
BUILD_ROOT = pathlib.Path("/tmp/fp4graph-kernels")
# The build interpreter: FlashInfer's JIT imports (the CPU imports of flashinfer 0.6.x) and
# a pinned tvm-ffi, whose headers are compiled into every module; torch comes separately.
BUILD_REQUIREMENTS = ("apache-tvm-ffi==0.1.15.post2", "ninja", "jinja2", "filelock", "click", "einops",
                      "numpy", "nvidia-ml-py", "packaging", "requests", "tabulate", "tqdm")


@dataclasses.dataclass(frozen=True, kw_only=True)
class KernelOptions:
    stack: str
    archs: tuple[Arch, ...]
    kinds: tuple[str, ...] | None = None  # None: what the stack's sglang warm-up requests
    jobs: int | None = None  # ninja -j (MAX_JOBS); None: ninja's default
    python: str = sys.executable  # the build interpreter (imports flashinfer: torch, tvm-ffi, ninja)
    flashinfer_wheel: pathlib.Path | None = None  # the patched wheel to build from (default: the engine's)
    work_dir: pathlib.Path | None = None  # the fixed build root (default BUILD_ROOT)
    deadline_s: float | None = None  # stop building this long after the start (resume later)
    use_cache: bool = True
    export_dir: pathlib.Path | None = None  # write the built modules there instead of wheels
    import_dirs: tuple[pathlib.Path, ...] = ()  # package exported modules instead of building
    platform: Platform | None = None  # the modules' host machine (default: this machine's); cross.py


@dataclasses.dataclass(frozen=True, kw_only=True)
class KernelsOutcome:
    kinds: tuple[str, ...]
    builds: tuple[ArchBuild, ...]
    seconds: dict[tuple[str, str], float | None]  # (arch, module name) -> build time (None: cached)
    wheels: tuple[BuiltKernels, ...] = ()  # added to wheels/
    exported: tuple[pathlib.Path, ...] = ()

    @property
    def complete(self) -> bool:
        return not any(b.unfinished for b in self.builds)


def _flashinfer_of(settings: Settings, stack: str) -> tuple[Artifact, str | None]:
    catalog = load(settings.stacks_file)
    found = catalog.stack(stack)
    artifacts = [catalog.artifacts[k] for k in found.artifacts]
    flashinfer = next((a for a in artifacts if a.project == FLASHINFER), None)
    if flashinfer is None:
        raise KernelsError(f"stack {stack!r} has no {FLASHINFER}: nothing to build kernels for")
    if Version(flashinfer.version) >= Version("0.7"):
        raise KernelsError(
            f"stack {stack!r}: {FLASHINFER} {flashinfer.version} loads prebuilt modules from "
            "flashinfer-jit-cache provider packages (jit/env.py _get_aot_providers), which fp4graph "
            "does not build yet; kernels wheels are built for the 0.6.x stacks"
        )
    sglang = next((a.version for a in artifacts if a.project == "sglang"), None)
    return flashinfer, sglang


def requirements(settings: Settings, stack: str, kinds: Sequence[str] | None = None) -> list[str]:
    """What the build interpreter needs besides torch: FlashInfer's JIT imports, and NVIDIA's
    cuBLAS/cuRAND header wheels of the toolkit's release when it lacks those headers (which
    FlashInfer's fp4 sources include; the probe does not)."""
    _flashinfer_of(settings, stack)
    needs = list(BUILD_REQUIREMENTS)
    if kinds == (targets.PROBE,):
        return needs
    cuda_home = toolchain.find_cuda_home()
    if not toolchain.toolkit_has_headers(cuda_home):
        release, _ = toolchain.nvcc_version(cuda_home)
        needs.append(f"cuda-toolkit[cublas,curand]=={release}.*")
    return needs


def _patched_wheel(settings: Settings, artifact: Artifact, given: pathlib.Path | None) -> pathlib.Path:
    if given is None:
        return wheels_build.patched_wheel(settings, artifact, artifact.file())
    expected = f"flashinfer_python-{artifact.patched_version}-"
    if not given.name.startswith(expected) or not given.is_file():
        raise KernelsError(f"{given}: not the patched {FLASHINFER} {artifact.patched_version} wheel "
                           f"({expected}*.whl); build it with `nox -s wheels`")
    return given


def _tree(wheel: pathlib.Path, sha256: str, base: pathlib.Path) -> pathlib.Path:
    """The patched wheel unpacked at ``base/tree`` (the fixed path the build embeds)."""
    tree, marker = base / "tree", base / "tree.sha256"
    if marker.exists() and marker.read_text().strip() == sha256 and (tree / "flashinfer").is_dir():
        return tree
    marker.unlink(missing_ok=True)
    with atomic_directory(tree, replace=True) as staging:
        unpack(wheel, staging)
    marker.write_text(sha256 + "\n")
    return tree


@contextlib.contextmanager
def _locked(base: pathlib.Path) -> Iterator[None]:
    """One kernels build of a flashinfer version at a time on this machine (the fixed path)."""
    base.mkdir(parents=True, exist_ok=True)
    with (base / ".lock").open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            log(f"waiting for another kernels build in {base}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _check_wheels_dir(settings: Settings, stack: str, artifact: Artifact, wheel_sha256: str) -> None:
    """wheels/ holds ``stack`` built with this very flashinfer wheel (checked before building)."""
    built = manifest.read_built(settings.wheels_dir)
    pin = built.stack(stack).pin(FLASHINFER)
    record = built.artifacts.get(artifact.key)
    if pin is None or str(pin.version) != artifact.patched_version or record is None or \
            wheel_sha256 not in {w.sha256 for w in record.wheels}:
        raise KernelsError(
            f"{settings.wheels_dir}: {stack}'s {FLASHINFER} is not the {artifact.patched_version} wheel "
            f"the kernels are built from (sha256 {wheel_sha256}); run `nox -s wheels` first"
        )


def _contents(artifact: Artifact, provenance: exchange.Provenance, arch_build: ArchBuild) -> package.Contents:
    return package.Contents(
        version=targets.wheel_version(Version(artifact.version), artifact.revision, provenance.cuda, arch_build.arch,
                                      [m.kind for m in arch_build.modules]),
        arch=arch_build.arch,
        cuda=provenance.cuda,
        flashinfer=provenance.flashinfer,
        flashinfer_sha256=provenance.flashinfer_sha256,
        flashinfer_commit=artifact.source.commit if artifact.source else "unknown",
        modules=[(m.kind, m.name, m.library, m.sha256) for m in arch_build.modules],
        toolchain=provenance.toolchain,
    )


def _record(wheel: pathlib.Path, contents: package.Contents) -> BuiltKernels:
    return BuiltKernels(
        filename=wheel.name, sha256=sha256_of(wheel), version=contents.version,
        flashinfer=manifest.Pin.parse(contents.flashinfer), flashinfer_sha256=contents.flashinfer_sha256,
        arch=str(contents.arch), cuda=contents.cuda,
        modules=tuple(KernelModule(kind=k, name=n, sha256=s) for k, n, _, s in contents.modules),
        toolchain=dict(contents.toolchain),
    )


def _check_complete(builds: Sequence[ArchBuild], kinds: Sequence[str]) -> None:
    problems = []
    for b in builds:
        problems += [f"{b.arch} {u.name} ({u.kind}): {u.status}"
                     + (f" at {u.done}/{u.total} steps" if u.total else "") for u in b.unfinished]
        have = {m.kind for m in b.modules}
        problems += [f"{b.arch} {k}: not built" for k in kinds if k not in have and not any(
            u.kind == k for u in b.unfinished)]
    if problems:
        raise KernelsError("no kernels wheel from an incomplete build:\n  " + "\n  ".join(problems)
                           + "\nrun the same command again: ninja resumes where it stopped")


def check_machine(builds: Sequence[ArchBuild], target: Platform) -> None:
    """Every module's host code is ``target``'s machine (its ELF header), before it is packed."""
    wrong = []
    for b in builds:
        for m in b.modules:
            machine, _ = elf.needed_versions(m.library.read_bytes())
            if machine != target.machine:
                wrong.append(f"{m.library} ({b.arch} {m.name}) is {machine}")
    if wrong:
        raise KernelsError(f"modules for {target.name} must be {target.machine} ELF files:\n  " + "\n  ".join(wrong))


def build_wheels(settings: Settings, artifact: Artifact, provenance: exchange.Provenance,
                 builds: Sequence[ArchBuild], dest_dir: pathlib.Path) -> list[tuple[pathlib.Path, BuiltKernels]]:
    """One wheel per arch in ``dest_dir``, each with its manifest record."""
    series = load_series(settings.patches_dir, artifact.project, artifact.version)
    epoch = wheels_build.source_date_epoch(series) if series else wheels_build.DEFAULT_EPOCH
    made = []
    for arch_build in builds:
        contents = _contents(artifact, provenance, arch_build)
        wheel = package.build_wheel(contents, dest_dir, epoch)
        made.append((wheel, _record(wheel, contents)))
    return made


def build(settings: Settings, options: KernelOptions) -> KernelsOutcome:
    """Build (or import) the modules, then write them as wheels into ``wheels/`` (or export them)."""
    artifact, sglang = _flashinfer_of(settings, options.stack)
    kinds = options.kinds or targets.default_kinds(sglang, options.stack)
    target = options.platform or cross.host()
    # The fixed path of the build (compile.py), one per platform: x86_64's as it always was.
    suffix = "" if target == cross.LINUX_X86_64 else f"-{target.name}"
    base = (options.work_dir or BUILD_ROOT) / f"{artifact.patched_version}{suffix}"
    wheel = _patched_wheel(settings, artifact, options.flashinfer_wheel)
    wheel_sha256 = sha256_of(wheel)
    requirement = f"{FLASHINFER}=={artifact.patched_version}"
    seconds: dict[tuple[str, str], float | None] = {}
    if options.export_dir is None:
        _check_wheels_dir(settings, options.stack, artifact, wheel_sha256)
    if options.import_dirs:
        builds, provenance = _imported(settings, options, target, kinds, requirement, wheel_sha256, seconds)
    else:
        tools = toolchain.identify(options.python, target=target, cache_dir=settings.cache_dir,
                                   fetch=lambda pinned: fetch(settings, cross.CUDART_PROJECT, pinned))
        provenance = exchange.Provenance(stack=options.stack, flashinfer=requirement, flashinfer_sha256=wheel_sha256,
                                         cuda=tools.nvcc_release, toolchain=tools.identity)
        deadline = time.time() + options.deadline_s if options.deadline_s else None
        built = []
        with _locked(base):
            tree = _tree(wheel, wheel_sha256, base)
            for arch in options.archs:
                arch_build = compile.compile_arch(
                    python=options.python, tree=tree, flashinfer_sha256=wheel_sha256, arch=arch, kinds=kinds,
                    toolchain=tools, cache_dir=settings.cache_dir, work_dir=base, jobs=options.jobs,
                    deadline=deadline, use_cache=options.use_cache)
                built.append(arch_build)
                seconds.update({(str(arch), m.name): m.seconds for m in arch_build.modules})
                seconds.update({(str(arch), u.name): u.seconds for u in arch_build.unfinished})
                if arch_build.unfinished:
                    break
        builds = tuple(built)
    check_machine(builds, target)
    if options.export_dir is not None:
        written = exchange.export(options.export_dir, builds, provenance, target=target)
        return KernelsOutcome(kinds=kinds, builds=builds, seconds=seconds, exported=tuple(written))
    _check_complete(builds, kinds)
    with tempfile.TemporaryDirectory(dir=settings.cache_dir, prefix=".kernels-") as tmp:
        made = build_wheels(settings, artifact, provenance, builds, pathlib.Path(tmp))
        outdir.add_kernels(settings.wheels_dir, made)
    return KernelsOutcome(kinds=kinds, builds=builds, seconds=seconds, wheels=tuple(r for _, r in made))


def _imported(settings: Settings, options: KernelOptions, target: Platform, kinds: Sequence[str], requirement: str,
              wheel_sha256: str, seconds: dict[tuple[str, str], float | None],
              ) -> tuple[tuple[ArchBuild, ...], exchange.Provenance]:
    """The exported modules of ``kinds`` for ``options.archs`` (an arch's modules may come
    from several exports of one build: a call per module kind), checked against the local
    patched wheel."""
    modules: dict[Arch, dict[str, compile.Module]] = {}
    provenances: dict[tuple[object, ...], exchange.Provenance] = {}
    for index_file in exchange.find_exports(options.import_dirs):
        imported = exchange.load(index_file, settings.cache_dir)
        p = imported.provenance
        if p.flashinfer != requirement or p.flashinfer_sha256 != wheel_sha256:
            raise KernelsError(
                f"{index_file}: built from {p.flashinfer} (sha256 {p.flashinfer_sha256}), not this "
                f"checkout's {requirement} (sha256 {wheel_sha256}): carry the patched wheel this "
                "checkout builds (`nox -s wheels`) and build again"
            )
        if imported.build.arch not in options.archs or imported.platform != target.name:
            continue
        provenances[(p.stack, p.flashinfer, p.flashinfer_sha256, p.cuda, tuple(sorted(p.toolchain.items())))] = p
        have = modules.setdefault(imported.build.arch, {})
        for m in imported.build.modules:
            if m.kind not in kinds:
                continue
            if m.kind in have and have[m.kind].sha256 != m.sha256:
                raise KernelsError(f"{index_file}: {imported.build.arch} {m.name} differs from another "
                                   "export's: import the exports of one build")
            have[m.kind] = m
            seconds[(str(imported.build.arch), m.name)] = imported.seconds.get(m.name)
    missing = [str(a) for a in options.archs if a not in modules]
    if missing:
        raise KernelsError(f"no {target.name} export of {', '.join(missing)} in {', '.join(map(str, options.import_dirs))}")
    if len(provenances) != 1:
        raise KernelsError("the exports were built with different toolchains or inputs: import one build's exports")
    kinds_order = list(targets.KINDS)
    builds = tuple(
        ArchBuild(arch=a, modules=tuple(sorted(modules[a].values(), key=lambda m: kinds_order.index(m.kind))),
                  unfinished=(), log=None)
        for a in options.archs
    )
    (provenance,) = provenances.values()
    return builds, provenance
