"""Upstream's own test suites as the regression gate of a patched wheel.

A patched wheel replaces its upstream package for everything, not only for the code a series
changes; distribution packagers gate such a package on upstream's own tests (Debian
autopkgtest, conda-forge's ``test:``).  For one stack and project this module

1. gets upstream's test files at the commit ``source`` pins in patches/stacks.toml, from
   GitHub or from a local clone, and refuses a tag that names another commit;
2. installs the patched and the pristine wheels (``pip install --no-deps --target``), each in
   a directory of its own, together with the stack's companion wheels (sglang's flashinfer);
3. runs a declared selection of upstream's files (:data:`SELECTIONS`), file by file, each in a
   fresh pytest process with a time budget, first against the patched install, then the
   pristine one;
4. compares the outcomes test by test (:mod:`.suite_report`): a test that passes pristine and
   fails patched is a regression and fails the run; a file that runs out of time is reported as
   such.

Steps 1-2 make a *bundle* (a directory; ``--pack`` writes it as one ``.tar.xz``), step 3-4 run
one, so the files can be prepared where GitHub and PyPI are reachable and run on a GPU machine
that reaches neither.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fnmatch
import functools
import hashlib
import io
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator, Sequence
from email.parser import HeaderParser
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename

from .. import build, config
from ..errors import Fp4graphError
from ..fetch import fetch, sha256_of
from ..files import write_atomic
from ..log import log
from ..series import load_series
from ..srcrepo import git_env
from ..stacks import Artifact, ArtifactFile, Catalog, SourcePin, load
from . import suite_report

PLUGIN = "fp4graph_suite_plugin"
BUNDLE_FORMAT = 1
# Installed files get this mtime (2000-01-01), so that two installs at one path look alike to
# ninja and a JIT cache can be shared between them (see ``jit_cache``).
FIXED_MTIME = 946684800
VARIANTS = ("patched", "pristine")


class SuiteError(Fp4graphError):
    """Upstream's tests could not be fetched, verified, installed or run."""


# --------------------------------------------------------------------------- the data table


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SuiteFile:
    """One entry of a selection: an upstream test file (or an fnmatch pattern of them)."""

    pattern: str  # upstream-repository path; fnmatch pattern where it has * ? [
    area: str
    budget_s: int  # wall-clock seconds for one run of the file, JIT builds included
    args: tuple[str, ...] = ()  # extra pytest arguments, e.g. ("-k", "fp4")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SeriesTests:
    """Upstream's tests of the modules a series touches, found at the tag.

    A test file is selected when it lies under ``roots``, contains ``marker`` (upstream's own
    sign that it runs on a CPU) and imports one of the modules the series patches.
    """

    roots: tuple[str, ...]
    marker: str
    area: str
    budget_s: int
    source_prefix: str  # where the package lives in the repository ("python/")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Selection:
    project: str
    files: tuple[SuiteFile, ...] = ()
    series_tests: SeriesTests | None = None
    export: tuple[str, ...] = ()  # support paths the files need (conftest, helpers, config)
    companions: tuple[str, ...] = ()  # other projects of the stack installed beside it
    needs_cuda: bool = False
    jit_env: str | None = None  # the variable that moves the project's JIT cache
    requirements: tuple[str, ...] = ()  # test-time requirements besides the wheels' own
    wheel_requirements: bool = True  # install the wheel's Requires-Dist for the tests
    pytest_args: tuple[str, ...] = ()


# FlashInfer: the fp4 files (quantize, mm_fp4, fused MoE fp4; they skip below SM100) and the
# modules every user of the wheel hits.  Budgets are for one SM120 card with an empty JIT
# cache; ``--budget`` / ``--budget-scale`` change them.
FLASHINFER = Selection(
    project="flashinfer-python",
    files=(
        SuiteFile(pattern="tests/utils/test_fp4_quantize.py", area="fp4 quantize", budget_s=900),
        SuiteFile(pattern="tests/gemm/test_mm_fp4.py", area="fp4 mm_fp4", budget_s=1200),
        SuiteFile(
            pattern="tests/moe/test_trtllm_cutlass_fused_moe.py",
            area="fp4 fused MoE (cutlass)",
            budget_s=1800,
            args=("-k", "fp4"),
        ),
        SuiteFile(
            pattern="tests/moe/test_trtllm_gen_fused_moe.py",
            area="fp4 fused MoE (trtllm-gen, SM100)",
            budget_s=1800,
            args=("-k", "fp4"),
        ),
        SuiteFile(pattern="tests/utils/test_norm.py", area="norm", budget_s=900),
        SuiteFile(pattern="tests/utils/test_activation.py", area="activation", budget_s=600),
        SuiteFile(pattern="tests/attention/test_rope.py", area="rope", budget_s=1200),
        SuiteFile(pattern="tests/utils/test_sampling.py", area="sampling", budget_s=1200),
        SuiteFile(
            pattern="tests/attention/test_batch_decode_kernels.py",
            area="decode attention",
            budget_s=1800,
        ),
        SuiteFile(
            pattern="tests/attention/test_batch_prefill_kernels.py",
            area="prefill attention",
            budget_s=1800,
        ),
        SuiteFile(pattern="tests/attention/test_page.py", area="page", budget_s=300),
    ),
    export=("pytest.ini", "tests"),  # conftest.py, test_helpers/ and per-area helpers
    needs_cuda=True,
    jit_env="FLASHINFER_WORKSPACE_BASE",
    requirements=("pytest", "numpy", "cuda-python"),
)

# sglang: the CPU-registered unit tests (``register_cpu_ci``) of the modules the series patch.
SGLANG = Selection(
    project="sglang",
    series_tests=SeriesTests(
        roots=("test/registered/unit", "test/srt"),
        marker="register_cpu_ci(",
        area="series modules (CPU)",
        budget_s=300,
        source_prefix="python/",
    ),
    export=("test/pytest.ini", "test/conftest.py", "test/registered/conftest.py",
            "test/registered/unit/conftest.py"),
    companions=("flashinfer-python",),
    # sglang's own dependencies are a GPU server's; its CPU unit tests import with these.
    wheel_requirements=False,
    requirements=(
        "pytest", "transformers==5.6.0", "pybase64", "requests", "ipython", "aiohttp", "triton",
        "orjson", "pyzmq", "pillow", "starlette", "openai", "partial-json-parser", "dill",
        "sentencepiece", "compressed-tensors", "loguru", "gguf", "msgspec", "regex", "fastapi",
        "uvicorn", "uvloop", "psutil", "setproctitle", "einops", "numpy", "safetensors",
        "tokenizers",
    ),
)

SELECTIONS: dict[str, Selection] = {s.project: s for s in (FLASHINFER, SGLANG)}


# --------------------------------------------------------------------------- git


def _git(repo: pathlib.Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    cmd = ["git", "-C", str(repo), *args]
    log(subprocess.list2cmdline(cmd))
    result = subprocess.run(cmd, capture_output=True, env=git_env(None))
    if check and result.returncode != 0:
        raise SuiteError(
            f"`{subprocess.list2cmdline(cmd)}` failed ({result.returncode}): "
            + result.stderr.decode(errors="replace").strip()
        )
    return result


def _rev(repo: pathlib.Path, ref: str) -> str | None:
    result = _git(repo, "rev-parse", "--verify", "-q", ref, check=False)
    if result.returncode != 0:
        return None
    return result.stdout.decode().strip() or None


def verify_pin(repo: pathlib.Path, pin: SourcePin, where: str) -> str:
    """Check that ``repo`` holds ``pin``'s commit and that its tag names it; return a note.

    The files are read from the pinned commit's objects, never from a working tree, so a
    checkout elsewhere (or with local edits) cannot leak into the run.
    """
    if _git(repo, "rev-parse", "--git-dir", check=False).returncode != 0:
        raise SuiteError(f"{where}: {repo} is not a git repository (pass --repo a clone of {pin.repo})")
    tagged = _rev(repo, f"refs/tags/{pin.tag}^{{commit}}")
    if tagged is not None and tagged != pin.commit:
        raise SuiteError(
            f"{where}: in {repo}, tag {pin.tag} is commit {tagged}, but patches/stacks.toml pins "
            f"{pin.commit}: refusing to run upstream's tests from another commit "
            "(re-fetch the tag from upstream, or correct the pin)"
        )
    if tagged is None:
        if _rev(repo, f"{pin.commit}^{{commit}}") is None:
            raise SuiteError(
                f"{where}: {repo} has neither tag {pin.tag} nor the pinned commit {pin.commit} "
                f"(git -C {repo} fetch https://github.com/{pin.repo} tag {pin.tag})"
            )
        return f"commit {pin.commit} of {repo} (tag {pin.tag} absent there)"
    return f"tag {pin.tag} = commit {pin.commit} of {repo}"


def fetch_pin(settings: config.Settings, pin: SourcePin, url: str | None = None) -> pathlib.Path:
    """A cached bare repository holding ``pin``'s tag, fetched (depth 1) from GitHub or ``url``."""
    repo = settings.cache_dir / "upstream-git" / f"{pin.repo.replace('/', '+')}.git"
    if not (repo / "HEAD").is_file():
        repo.mkdir(parents=True, exist_ok=True)
        _git(repo, "init", "-q", "--bare")
    source = url or pin.url
    result = _git(
        repo, "fetch", "-q", "--depth", "1", "--no-tags", source,
        f"+refs/tags/{pin.tag}:refs/tags/{pin.tag}", check=False,
    )
    if result.returncode != 0:
        raise SuiteError(
            f"could not fetch tag {pin.tag} from {source}: "
            + result.stderr.decode(errors="replace").strip()
            + f"\nWithout GitHub access, pass --repo PATH (a clone of {pin.repo} with its tags)."
        )
    return repo


def _tree_paths(repo: pathlib.Path, commit: str) -> list[str]:
    out = _git(repo, "ls-tree", "-r", "--name-only", "-z", commit).stdout.decode()
    return [p for p in out.split("\0") if p]


def _blobs(repo: pathlib.Path, commit: str, paths: Sequence[str]) -> dict[str, str]:
    """The text of ``paths`` at ``commit`` (one ``git cat-file --batch`` process)."""
    request = "".join(f"{commit}:{p}\n" for p in paths).encode()
    out = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "--batch"], input=request,
        capture_output=True, check=True, env=git_env(None),
    ).stdout
    texts: dict[str, str] = {}
    pos = 0
    for path in paths:
        header_end = out.index(b"\n", pos)
        header = out[pos:header_end].split()
        size = int(header[2])
        texts[path] = out[header_end + 1: header_end + 1 + size].decode(errors="replace")
        pos = header_end + 1 + size + 1
    return texts


def _export(repo: pathlib.Path, commit: str, paths: Sequence[str], dest: pathlib.Path) -> None:
    """Write ``paths`` (files) as they are at ``commit`` under ``dest``."""
    if not paths:
        return
    data = _git(repo, "archive", "--format=tar", commit, "--", *paths).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")


def _matches(path: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(path, pattern)


def touched_modules(settings: config.Settings, artifact: Artifact, prefix: str) -> list[str]:
    """Dotted names of the Python modules the artifact's series patches."""
    series = load_series(settings.patches_dir, artifact.project, artifact.version)
    if series is None:
        return []
    modules = []
    for patch in series.patches:
        for path in patch.files:
            if path.startswith(prefix) and path.endswith(".py"):
                name = path[len(prefix): -3].replace("/", ".")
                modules.append(name.removesuffix(".__init__"))
    return sorted(set(modules))


def _imports(text: str, module: str) -> bool:
    parent, _, leaf = module.rpartition(".")
    return bool(
        re.search(rf"\b{re.escape(module)}\b", text)
        or (parent and re.search(rf"from\s+{re.escape(parent)}\s+import\s+[^\n]*\b{leaf}\b", text))
    )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Selected:
    path: str
    area: str
    budget_s: int
    args: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "args": list(self.args)}


def select(
    selection: Selection, tree: Sequence[str], read: Any, modules: Sequence[str]
) -> tuple[list[Selected], list[str]]:
    """The files of ``selection`` present in ``tree``, and the entries absent from it."""
    chosen: list[Selected] = []
    absent: list[str] = []
    for entry in selection.files:
        hits = [p for p in tree if _matches(p, entry.pattern)]
        if not hits:
            absent.append(entry.pattern)
        chosen += [Selected(path=p, area=entry.area, budget_s=entry.budget_s, args=entry.args) for p in hits]
    rule = selection.series_tests
    if rule is not None and modules:
        candidates = [
            p for p in tree
            if p.endswith(".py") and pathlib.PurePosixPath(p).name.startswith("test_")
            and any(p.startswith(root.rstrip("/") + "/") for root in rule.roots)
        ]
        texts: dict[str, str] = read(candidates) if candidates else {}
        for path in candidates:
            text = texts[path]
            if rule.marker in text and any(_imports(text, m) for m in modules):
                chosen.append(Selected(path=path, area=rule.area, budget_s=rule.budget_s))
        if not any(s.area == rule.area for s in chosen):
            absent.append(f"{rule.marker} tests under {', '.join(rule.roots)} importing "
                          + ", ".join(modules))
    return chosen, absent


def _support_paths(selection: Selection, tree: Sequence[str], chosen: Sequence[Selected]) -> list[str]:
    wanted = {s.path for s in chosen}
    for path in tree:
        for pattern in selection.export:
            if _matches(path, pattern) or path.startswith(pattern.rstrip("/") + "/"):
                wanted.add(path)
    # Every conftest.py and __init__.py on the way to a selected file.
    present = set(tree)
    for s in chosen:
        parts = pathlib.PurePosixPath(s.path).parts[:-1]
        for i in range(len(parts) + 1):
            for name in ("conftest.py", "__init__.py"):
                candidate = "/".join([*parts[:i], name])
                if candidate in present:
                    wanted.add(candidate)
    return sorted(wanted)


# --------------------------------------------------------------------------- installs


def wheel_for_python(artifact: Artifact) -> ArtifactFile:
    """The pinned wheel this interpreter installs (sglang >= 0.5.11 pins one per CPython)."""
    if len(artifact.files) == 1:
        return artifact.files[0]
    supported = set(sys_tags())
    for pinned in artifact.files:
        if supported & set(parse_wheel_filename(pinned.filename)[3]):
            return pinned
    raise SuiteError(
        f"{artifact.key}: none of its pinned wheels installs on this Python "
        f"({sys.version.split()[0]}): " + ", ".join(f.filename for f in artifact.files)
    )


def install(python: str, wheels: Sequence[pathlib.Path], dest: pathlib.Path) -> None:
    """``pip install --no-deps --target dest`` of ``wheels``; mtimes fixed (see FIXED_MTIME)."""
    cmd = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--no-index",
           "--disable-pip-version-check", "--target", str(dest), *map(str, wheels)]
    log(subprocess.list2cmdline(cmd))
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise SuiteError(f"`{subprocess.list2cmdline(cmd)}` failed:\n{result.stderr.strip()}")
    for path in [dest, *dest.rglob("*")]:
        os.utime(path, (FIXED_MTIME, FIXED_MTIME), follow_symlinks=False)


def _digests(tree: pathlib.Path) -> dict[str, str]:
    out = {}
    for path in sorted(tree.rglob("*")):
        if path.is_file():
            rel = path.relative_to(tree).as_posix()
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def jit_difference(a: pathlib.Path, b: pathlib.Path) -> str | None:
    """Why two installs cannot share a JIT cache, or None.

    They can when they differ in Python files and metadata only: then every source, header and
    generated file a JIT build reads is the same, and ninja rebuilds exactly the modules whose
    command line differs.
    """
    da, db = _digests(a), _digests(b)

    def relevant(rel: str) -> bool:
        top = rel.split("/", 1)[0]
        return not rel.endswith(".py") and not top.endswith(".dist-info")

    diff = sorted(
        rel for rel in set(da) | set(db) if relevant(rel) and da.get(rel) != db.get(rel)
    )
    if diff:
        return f"{len(diff)} non-Python file(s) differ, e.g. {diff[0]}"
    return None


# --------------------------------------------------------------------------- bundles


@dataclasses.dataclass(frozen=True, slots=True)
class Bundle:
    """Upstream's test files at the pinned commit and the two installs, ready to run."""

    path: pathlib.Path
    manifest: dict[str, Any]

    @property
    def tests_root(self) -> pathlib.Path:
        return self.path / "upstream"

    def site(self, variant: str) -> pathlib.Path:
        return self.path / f"site-{variant}"

    @property
    def name(self) -> str:
        return f"{self.manifest['project']}-{self.manifest['version']}"


def _stack_artifact(catalog: Catalog, stack: str, project: str) -> Artifact:
    for artifact in catalog.stack_artifacts(catalog.stack(stack)):
        if artifact.project == project:
            return artifact
    raise SuiteError(f"stack {stack} has no {project} artifact")


def _wheel_pair(settings: config.Settings, artifact: Artifact) -> dict[str, pathlib.Path]:
    pinned = wheel_for_python(artifact)
    pair = {"pristine": fetch(settings, artifact.project, pinned)}
    series = load_series(settings.patches_dir, artifact.project, artifact.version)
    # A companion without a series is installed as upstream publishes it, in both variants.
    pair["patched"] = build.patched_wheel(settings, artifact, pinned) if series else pair["pristine"]
    return pair


def prepare(
    settings: config.Settings,
    stack: str,
    project: str,
    dest: pathlib.Path,
    *,
    repo: pathlib.Path | None = None,
    url: str | None = None,
    patched: pathlib.Path | None = None,
    python: str = sys.executable,
    selection: Selection | None = None,
) -> Bundle:
    """Make the bundle of ``stack``'s ``project`` at ``dest`` (which must not exist)."""
    catalog = load(settings.stacks_file)
    selection = selection or SELECTIONS.get(project)
    if selection is None:
        raise SuiteError(f"no test selection for {project}; known: {', '.join(SELECTIONS)}")
    artifact = _stack_artifact(catalog, stack, project)
    where = f"stack {stack}: {artifact.project} {artifact.version}"
    pin = artifact.source
    if pin is None:
        raise SuiteError(
            f"{where}: patches/stacks.toml pins no source; add "
            f'source = {{ repo = "OWNER/NAME", tag = "v{artifact.version}", commit = "<40 hex>" }} '
            f"to the artifact (the commit: git rev-parse v{artifact.version}^{{commit}})"
        )
    git_repo = repo if repo is not None else fetch_pin(settings, pin, url)
    origin = verify_pin(git_repo, pin, where)
    if repo is None:
        origin = f"{url or pin.url} (fetched): {origin}"
    log(f"{where}: upstream files from {origin}")

    tree = _tree_paths(git_repo, pin.commit)
    modules = (
        touched_modules(settings, artifact, selection.series_tests.source_prefix)
        if selection.series_tests else []
    )
    chosen, absent = select(selection, tree, lambda paths: _blobs(git_repo, pin.commit, paths), modules)

    if dest.exists():
        raise SuiteError(f"{dest}: already exists")
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _export(git_repo, pin.commit, _support_paths(selection, tree, chosen), tmp / "upstream")
        (tmp / "upstream").mkdir(exist_ok=True)
        wheels: dict[str, list[pathlib.Path]] = {v: [] for v in VARIANTS}
        for name in (project, *selection.companions):
            pair = _wheel_pair(settings, _stack_artifact(catalog, stack, name))
            if name == project and patched is not None:
                pair["patched"] = patched
            for variant in VARIANTS:
                wheels[variant].append(pair[variant])
        for variant in VARIANTS:
            install(python, wheels[variant], tmp / f"site-{variant}")
        manifest = {
            "format": BUNDLE_FORMAT,
            "stack": stack,
            "project": artifact.project,
            "version": artifact.version,
            "source": {**dataclasses.asdict(pin), "origin": origin},
            "series_modules": modules,
            "files": [s.to_json() for s in chosen],
            "absent": absent,
            "wheels": {
                v: [{"filename": w.name, "sha256": sha256_of(w)} for w in wheels[v]] for v in VARIANTS
            },
            "jit_env": selection.jit_env,
            "needs_cuda": selection.needs_cuda,
            "pytest_args": list(selection.pytest_args),
            "jit_shareable": jit_difference(tmp / "site-patched", tmp / "site-pristine") is None
            if selection.jit_env else False,
        }
        write_atomic(tmp / "bundle.json", json.dumps(manifest, indent=2) + "\n")
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Bundle(dest, manifest)


def pack(bundle: Bundle, dest: pathlib.Path) -> pathlib.Path:
    """Write ``bundle`` as one reproducible ``.tar.xz``.

    Members are sorted by their path inside each install, so the two near-identical installs
    alternate file by file and xz stores the second copy of each file almost for free.
    """
    def key(path: pathlib.Path) -> tuple[str, str]:
        rel = path.relative_to(bundle.path)
        top, *rest = rel.parts
        return ("/".join(rest), top) if top.startswith("site-") else (rel.as_posix(), "")

    members = sorted((p for p in bundle.path.rglob("*") if p.is_file()), key=key)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    with tarfile.open(tmp, "w:xz", preset=6) as tar:
        for path in members:
            info = tar.gettarinfo(str(path), arcname=f"{bundle.name}/{path.relative_to(bundle.path).as_posix()}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = FIXED_MTIME, 0, 0, "", ""
            with path.open("rb") as f:
                tar.addfile(info, f)
    os.replace(tmp, dest)
    return dest


def open_bundle(path: pathlib.Path, work: pathlib.Path) -> Bundle:
    """A bundle directory, or a packed one unpacked under ``work``."""
    if path.is_file():
        with tarfile.open(path) as tar:
            tops = {m.name.split("/", 1)[0] for m in tar.getmembers()}
            if len(tops) != 1:
                raise SuiteError(f"{path}: not a suite bundle (top-level entries {sorted(tops)})")
            tar.extractall(work, filter="data")
        path = work / tops.pop()
    manifest_path = path / "bundle.json"
    if not manifest_path.is_file():
        raise SuiteError(f"{path}: not a suite bundle (no bundle.json)")
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("format") != BUNDLE_FORMAT:
        raise SuiteError(f"{manifest_path}: bundle format {manifest.get('format')}, expected {BUNDLE_FORMAT}")
    return Bundle(path, manifest)


def check_bundle_pin(bundle: Bundle, catalog: Catalog) -> None:
    """Refuse a bundle whose upstream files are not from the commit stacks.toml pins now."""
    m = bundle.manifest
    where = f"stack {m['stack']}: {m['project']} {m['version']}"
    pin = catalog.artifact(m["project"], m["version"]).source
    if pin is None or pin.commit != m["source"]["commit"]:
        raise SuiteError(
            f"{where}: bundle {bundle.path} holds upstream files from commit {m['source']['commit']}, "
            f"but patches/stacks.toml pins {pin.commit if pin else 'no source'}; prepare it again"
        )


# --------------------------------------------------------------------------- running


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunOptions:
    python: str = sys.executable
    budget_s: float | None = None  # every file's budget
    budget_scale: float = 1.0
    deadline: float | None = None  # Unix time by which the whole run ends
    files: tuple[str, ...] = ()  # fnmatch patterns of files to keep
    areas: tuple[str, ...] = ()
    jit_cache: str = "auto"  # auto | shared | separate
    pytest_args: tuple[str, ...] = ()
    grace_s: float = 30.0  # after the budget, before the run is killed


def _plugin_dir(work: pathlib.Path) -> pathlib.Path:
    d = work / "plugin"
    d.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pathlib.Path(__file__).with_name("suite_plugin.py"), d / f"{PLUGIN}.py")
    return d


def _read_events(path: pathlib.Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            events.append(json.loads(line))
    return events


def run_file(
    *,
    python: str,
    tests_root: pathlib.Path,
    site: pathlib.Path,
    plugin: pathlib.Path,
    selected: Selected,
    budget_s: float,
    grace_s: float,
    results: pathlib.Path,
    log_path: pathlib.Path,
    env_extra: dict[str, str],
    pytest_args: Sequence[str] = (),
) -> dict[str, Any]:
    """One pytest process on one upstream file against one install; its outcomes."""
    results.unlink(missing_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    env.update(env_extra)
    inherited = os.environ.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(site), str(plugin), *([inherited] if inherited else [])]
    )
    start = time.time()
    env.update(
        FP4GRAPH_SUITE_RESULTS=str(results),
        FP4GRAPH_SUITE_DEADLINE=str(start + budget_s),
        FP4GRAPH_SUITE_BUDGET=str(round(budget_s)),
        PYTHONDONTWRITEBYTECODE="1",
    )
    cmd = [python, "-m", "pytest", selected.path, "-p", PLUGIN, "-p", "no:cacheprovider",
           "-q", "-rN", *selected.args, *pytest_args]
    log(f"{site.name}: {subprocess.list2cmdline(cmd)} (budget {budget_s:.0f} s)")
    killed = False
    with log_path.open("w", encoding="utf-8") as out:
        out.write(f"$ {subprocess.list2cmdline(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(cmd, cwd=tests_root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            returncode = proc.wait(timeout=budget_s + grace_s)
        except subprocess.TimeoutExpired:
            killed = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            returncode = proc.wait()
    events = _read_events(results)
    return {
        "path": selected.path,
        "returncode": returncode,
        "killed": killed,
        "wall_s": round(time.time() - start, 1),
        "budget_s": round(budget_s),
        "events": events,
        "log_tail": log_path.read_text(encoding="utf-8", errors="replace")[-3000:],
    }


@contextlib.contextmanager
def _site_at(bundle: Bundle, variant: str, shared: bool) -> Iterator[pathlib.Path]:
    """The install of ``variant``; in shared-JIT mode moved to one path for both variants."""
    site = bundle.site(variant)
    if not shared:
        yield site
        return
    common = bundle.path / "site"
    site.rename(common)
    try:
        yield common
    finally:
        common.rename(site)


@functools.cache
def probe_device(python: str) -> dict[str, Any]:
    """torch, CUDA and the GPU as the test interpreter sees them (no wheel under test loaded)."""
    code = (
        "import json, platform\n"
        "info = {'python': platform.python_version()}\n"
        "try:\n"
        "    import torch\n"
        "    info.update(torch=torch.__version__, cuda=torch.version.cuda,\n"
        "                cuda_available=torch.cuda.is_available())\n"
        "    if info['cuda_available']:\n"
        "        info.update(gpu=torch.cuda.get_device_name(0),\n"
        "                    capability=list(torch.cuda.get_device_capability(0)))\n"
        "except Exception as exc:\n"
        "    info['torch_error'] = repr(exc)\n"
        "print(json.dumps(info))\n"
    )
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    try:
        info: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        info = {"probe_error": (result.stderr or result.stdout).strip()[-500:]}
    return info


def _chosen(bundle: Bundle, options: RunOptions) -> list[Selected]:
    files = [Selected(path=f["path"], area=f["area"], budget_s=f["budget_s"], args=tuple(f["args"]))
             for f in bundle.manifest["files"]]
    if options.files:
        files = [f for f in files if any(_matches(f.path, p) or f.path == p for p in options.files)]
    if options.areas:
        files = [f for f in files if any(a in f.area for a in options.areas)]
    return files


def run_bundle(bundle: Bundle, work: pathlib.Path, options: RunOptions) -> dict[str, Any]:
    """Run the bundle's files against both installs and compare them: the report (a dict)."""
    m = bundle.manifest
    device = dict(probe_device(options.python))
    shared = False
    if m.get("jit_env"):
        if options.jit_cache == "shared" and not m.get("jit_shareable"):
            raise SuiteError(f"{bundle.path}: the two installs differ beyond Python files: "
                             "they cannot share a JIT cache (use --jit-cache separate)")
        shared = options.jit_cache == "shared" or (options.jit_cache == "auto" and m["jit_shareable"])
    plugin = _plugin_dir(work)
    files = _chosen(bundle, options)
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    skipped: dict[str, str] = {}
    if m.get("needs_cuda") and not device.get("cuda_available"):
        skipped = {f.path: "needs a CUDA GPU; none is visible to torch" for f in files}
        files = []
    for selected in files:
        budget = options.budget_s if options.budget_s is not None else selected.budget_s * options.budget_scale
        if options.deadline is not None:
            left = options.deadline - time.time() - 2 * options.grace_s
            if left < 2 * 15:
                skipped[selected.path] = "not run: the session deadline is near"
                continue
            budget = min(budget, left / 2)
        runs[selected.path] = {}
        for variant in VARIANTS:
            slug = selected.path.replace("/", "_")
            env_extra = {}
            if m.get("jit_env"):
                env_extra[m["jit_env"]] = str(work / ("jit" if shared else f"jit-{variant}"))
            with _site_at(bundle, variant, shared) as site:
                runs[selected.path][variant] = run_file(
                    python=options.python, tests_root=bundle.tests_root, site=site, plugin=plugin,
                    selected=selected, budget_s=budget, grace_s=options.grace_s,
                    results=work / variant / f"{slug}.jsonl", log_path=work / variant / f"{slug}.log",
                    env_extra=env_extra, pytest_args=(*m.get("pytest_args", ()), *options.pytest_args),
                )
    return suite_report.build(
        manifest=m, device=device, runs=runs, skipped=skipped, jit_shared=shared,
        selected=[f.to_json() for f in _chosen(bundle, options)],
    )


# --------------------------------------------------------------------------- requirements


def requirements(settings: config.Settings, stack: str, projects: Sequence[str],
                 torch: str | None = None) -> list[str]:
    """What the test interpreter needs besides the wheels under test (for `nox -s suites`)."""
    catalog = load(settings.stacks_file)
    torch_pin = torch or catalog.stack(stack).torch
    reqs: list[str] = [f"torch=={torch_pin}" if torch_pin else "torch"]
    for project in projects:
        selection = SELECTIONS[project]
        reqs += selection.requirements
        names = [project] if selection.wheel_requirements else []
        for name in [*names, *selection.companions]:
            wheel = fetch(settings, name, wheel_for_python(_stack_artifact(catalog, stack, name)))
            reqs += _requires_dist(wheel)
    out: list[str] = []
    for req in reqs:
        if Requirement(req).name != "torch" or req == reqs[0]:
            if req not in out:
                out.append(req)
    return out


def _requires_dist(wheel: pathlib.Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = HeaderParser().parsestr(zf.read(name).decode())
    out = []
    for raw in metadata.get_all("Requires-Dist") or []:
        try:
            req = Requirement(raw)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            req.marker = None
            out.append(str(req))
    return out


# --------------------------------------------------------------------------- command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run upstream's own tests, from the tag pinned in patches/stacks.toml, against the "
        "patched wheel beside the pristine one; fail on a test that passes pristine and fails "
        "patched."
    )
    parser.add_argument("stack", nargs="?", help="a stack of patches/stacks.toml (default sglang-0.5.9)")
    parser.add_argument("--project", action="append", choices=sorted(SELECTIONS),
                        help="only this project's selection (repeatable; default: every one in the stack)")
    parser.add_argument("--repo", action="append", default=[], metavar="[PROJECT=]PATH",
                        help="a local clone of upstream (with its tags) instead of GitHub")
    parser.add_argument("--patched", type=pathlib.Path, help="the patched wheel (default: built by the engine)")
    parser.add_argument("--bundle", action="append", type=pathlib.Path, default=[],
                        help="run a prepared bundle (directory or .tar.xz) instead of preparing one")
    parser.add_argument("--pack", type=pathlib.Path, metavar="DIR",
                        help="prepare the bundles, write them as DIR/<project>-<version>.tar.xz, run nothing")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("wheels/reports/suites"),
                        help="where report.md / report.json go (default wheels/reports/suites)")
    parser.add_argument("--work", type=pathlib.Path, help="working directory (default: a temporary one)")
    parser.add_argument("--file", action="append", default=[], help="only files matching (fnmatch)")
    parser.add_argument("--area", action="append", default=[], help="only files whose area contains this")
    parser.add_argument("--budget", type=float, help="seconds per file and install (overrides the table)")
    parser.add_argument("--budget-scale", type=float, default=1.0, help="multiply the table's budgets")
    parser.add_argument("--deadline", type=float, help="seconds for the whole command")
    parser.add_argument("--jit-cache", choices=("auto", "shared", "separate"), default="auto",
                        help="one JIT cache for both installs when they differ in Python files only (auto)")
    parser.add_argument("--pytest-arg", action="append", default=[], help="extra pytest argument")
    parser.add_argument("--requirements", action="store_true",
                        help="print the test interpreter's requirements and exit")
    parser.add_argument("--torch", help="torch version for --requirements (default: the stack's pin)")


def _repos(values: Sequence[str], projects: Sequence[str]) -> dict[str, pathlib.Path]:
    repos: dict[str, pathlib.Path] = {}
    for value in values:
        project, sep, path = value.rpartition("=")
        if not sep:
            if len(projects) != 1:
                raise SuiteError(f"--repo {value}: say which project (--repo PROJECT=PATH) or pass one --project")
            project = projects[0]
        repos[project] = pathlib.Path(path).expanduser()
    return repos


def _write_report(report: dict[str, Any], out: pathlib.Path, stem: str) -> None:
    write_atomic(out / f"{stem}.json", json.dumps(report, indent=2) + "\n")
    write_atomic(out / f"{stem}.md", suite_report.markdown(report))


def run(args: argparse.Namespace) -> int:
    settings = config.Settings.from_env(config.find_checkout())
    catalog = load(settings.stacks_file)
    started = time.time()
    deadline = started + args.deadline if args.deadline else None
    options = RunOptions(
        budget_s=args.budget, budget_scale=args.budget_scale, deadline=deadline,
        files=tuple(args.file), areas=tuple(args.area), jit_cache=args.jit_cache,
        pytest_args=tuple(args.pytest_arg),
    )
    with contextlib.ExitStack() as stack_ctx:
        work = args.work or pathlib.Path(stack_ctx.enter_context(tempfile.TemporaryDirectory(prefix="fp4graph-suites-")))
        work.mkdir(parents=True, exist_ok=True)
        bundles: list[Bundle] = []
        if args.bundle:
            for i, path in enumerate(args.bundle):
                bundle = open_bundle(path, work / f"bundle-{i}")
                check_bundle_pin(bundle, catalog)
                bundles.append(bundle)
        else:
            stack = args.stack or os.environ.get("FP4GRAPH_STACK") or "sglang-0.5.9"
            present = [a.project for a in catalog.stack_artifacts(catalog.stack(stack))]
            projects = args.project or [p for p in SELECTIONS if p in present]
            if args.requirements:
                print("\n".join(requirements(settings, stack, projects, args.torch)))
                return 0
            repos = _repos(args.repo, projects)
            if args.patched and len(projects) != 1:
                raise SuiteError("--patched WHEEL needs exactly one --project")
            for project in projects:
                bundles.append(prepare(
                    settings, stack, project, work / f"{project}-{stack}", repo=repos.get(project),
                    patched=args.patched,
                ))
            if args.pack:
                for bundle in bundles:
                    packed = pack(bundle, args.pack / f"{bundle.name}.tar.xz")
                    print(f"{packed}  {packed.stat().st_size / 1e6:.1f} MB  "
                          f"{len(bundle.manifest['files'])} files, upstream {bundle.manifest['source']['tag']}")
                return 0
        failed = False
        for bundle in bundles:
            report = run_bundle(bundle, work / f"run-{bundle.name}", options)
            report["command"] = subprocess.list2cmdline(sys.argv)
            _write_report(report, args.out, f"{bundle.manifest['stack']}-{bundle.name}")
            print(suite_report.markdown(report))
            failed |= not report["ok"]
        print(f"suites: {'FAILED' if failed else 'ok'} ({time.time() - started:.0f} s); reports in {args.out}")
        return 1 if failed else 0
