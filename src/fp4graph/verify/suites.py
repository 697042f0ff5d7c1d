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
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from email.parser import HeaderParser
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename

from ..model import config
from ..model.files import write_atomic
from ..model.log import log
from ..model.series import load_series
from ..model.stacks import Artifact, ArtifactFile, Catalog, load
from ..wheels.fetch import fetch, sha256_of
from . import suite_report
from .suite_bundle import (
    BUNDLE_FORMAT,
    VARIANTS,
    Bundle,
    Selected,
    check_bundle_pin,
    install,
    jit_difference,
    open_bundle,
    pack,
)
from .suite_run import RunOptions, probe_device, run_bundle
from .suite_source import SuiteError, export, fetch_pin, matches, read_texts, tree_paths, verify_pin

__all__ = [
    "SELECTIONS", "Bundle", "RunOptions", "SeriesTests", "Selection", "SuiteError", "SuiteFile",
    "check_bundle_pin", "jit_difference", "open_bundle", "pack", "prepare", "requirements",
    "run", "run_bundle", "select",
]


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
        SuiteFile(pattern="tests/utils/test_fp4_quantize.py", area="fp4 quantize", budget_s=600),
        SuiteFile(pattern="tests/gemm/test_mm_fp4.py", area="fp4 mm_fp4", budget_s=600),
        SuiteFile(
            pattern="tests/moe/test_trtllm_cutlass_fused_moe.py",
            area="fp4 fused MoE (cutlass)",
            budget_s=900,
            args=("-k", "fp4"),
        ),
        SuiteFile(
            pattern="tests/moe/test_trtllm_gen_fused_moe.py",
            area="fp4 fused MoE (trtllm-gen, SM100)",
            budget_s=600,
            args=("-k", "fp4"),
        ),
        SuiteFile(pattern="tests/utils/test_norm.py", area="norm", budget_s=600),
        SuiteFile(pattern="tests/utils/test_activation.py", area="activation", budget_s=300),
        SuiteFile(pattern="tests/attention/test_rope.py", area="rope", budget_s=600),
        SuiteFile(pattern="tests/utils/test_sampling.py", area="sampling", budget_s=600),
        SuiteFile(
            pattern="tests/attention/test_batch_decode_kernels.py",
            area="decode attention",
            budget_s=900,
        ),
        SuiteFile(
            pattern="tests/attention/test_batch_prefill_kernels.py",
            area="prefill attention",
            budget_s=900,
        ),
        SuiteFile(pattern="tests/attention/test_page.py", area="page", budget_s=120),
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


def select(
    selection: Selection, tree: Sequence[str], read: Any, modules: Sequence[str]
) -> tuple[list[Selected], list[str]]:
    """The files of ``selection`` present in ``tree``, and the entries absent from it."""
    chosen: list[Selected] = []
    absent: list[str] = []
    for entry in selection.files:
        hits = [p for p in tree if matches(p, entry.pattern)]
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
            if matches(path, pattern) or path.startswith(pattern.rstrip("/") + "/"):
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


# --------------------------------------------------------------------------- preparing a bundle


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
    if series is None:
        pair["patched"] = pair["pristine"]
    else:
        from ..wheels.build import patched_wheel  # the wheel builder is not needed to run a bundle

        pair["patched"] = patched_wheel(settings, artifact, pinned)
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

    tree = tree_paths(git_repo, pin.commit)
    modules = (
        touched_modules(settings, artifact, selection.series_tests.source_prefix)
        if selection.series_tests else []
    )
    chosen, absent = select(selection, tree, lambda paths: read_texts(git_repo, pin.commit, paths), modules)

    if dest.exists():
        raise SuiteError(f"{dest}: already exists")
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        export(git_repo, pin.commit, _support_paths(selection, tree, chosen), tmp / "upstream")
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


def _projects(args: argparse.Namespace, catalog: Catalog, stack: str) -> list[str]:
    """The projects to run: those asked for, else every one with a selection and a pin."""
    pinned = {a.project: a.source for a in catalog.stack_artifacts(catalog.stack(stack))}
    if args.project:
        return list(args.project)
    for project in SELECTIONS:
        if project in pinned and not pinned[project]:
            print(f"suites: {stack}: skip {project}: patches/stacks.toml pins no source "
                  "(repo, tag, commit) for it")
    projects = [p for p in SELECTIONS if pinned.get(p)]
    if not projects:
        raise SuiteError(f"stack {stack}: no artifact with a test selection and a source pin")
    return projects


def _prepare_stack(args: argparse.Namespace, settings: config.Settings, catalog: Catalog,
                   work: pathlib.Path) -> list[Bundle] | None:
    """The bundles of the stack's projects (None: nothing left to do)."""
    stack = args.stack or os.environ.get("FP4GRAPH_STACK") or "sglang-0.5.9"
    projects = _projects(args, catalog, stack)
    if args.requirements:
        reqs = requirements(settings, stack, projects, args.torch)
        write_atomic(args.requirements, "\n".join(reqs) + "\n")
        print(f"{args.requirements}: {len(reqs)} requirements for {', '.join(projects)}")
        return None
    if not args.pack and not probe_device(sys.executable).get("cuda_available"):
        for project in [p for p in projects if SELECTIONS[p].needs_cuda]:
            print(f"suites: {stack}: skip {project}: its tests need a CUDA GPU and torch sees none")
            projects.remove(project)
    if not projects:
        print("suites: nothing to run here")
        return None
    if args.patched and len(projects) != 1:
        raise SuiteError("--patched WHEEL needs exactly one --project")
    repos = _repos(args.repo, projects)
    bundles = [
        prepare(settings, stack, project, work / f"{project}-{stack}", repo=repos.get(project),
                patched=args.patched)
        for project in projects
    ]
    if args.pack:
        for bundle in bundles:
            packed = pack(bundle, args.pack / f"{bundle.name}.tar.xz")
            print(f"{packed}  {packed.stat().st_size / 1e6:.1f} MB  "
                  f"{len(bundle.manifest['files'])} files, upstream {bundle.manifest['source']['tag']}")
        return None
    return bundles


def run(args: argparse.Namespace) -> int:
    settings = config.Settings.from_env(config.find_checkout())
    catalog = load(settings.stacks_file)
    started = time.time()
    options = RunOptions(
        budget_s=args.budget, budget_scale=args.budget_scale,
        deadline=started + args.deadline if args.deadline else None,
        files=tuple(args.file), areas=tuple(args.area), jit_cache=args.jit_cache,
        pytest_args=tuple(args.pytest_arg),
    )
    with contextlib.ExitStack() as cleanup:
        work = args.work or pathlib.Path(
            cleanup.enter_context(tempfile.TemporaryDirectory(prefix="fp4graph-suites-"))
        )
        work.mkdir(parents=True, exist_ok=True)
        if args.bundle:
            bundles = [open_bundle(path, work / f"bundle-{i}") for i, path in enumerate(args.bundle)]
            for bundle in bundles:
                check_bundle_pin(bundle, catalog)
        else:
            prepared = _prepare_stack(args, settings, catalog, work)
            if prepared is None:
                return 0
            bundles = prepared
        failed, compared = False, 0
        for bundle in bundles:
            report = run_bundle(bundle, work / f"run-{bundle.name}", options)
            report["command"] = subprocess.list2cmdline(sys.argv)
            _write_report(report, args.out, f"{bundle.manifest['stack']}-{bundle.name}")
            print(suite_report.markdown(report))
            failed |= not report["ok"]
            compared += report["files_compared"]
        verdict = "FAILED" if failed else ("ok" if compared else "ok, but nothing was compared")
        print(f"suites: {verdict} ({time.time() - started:.0f} s); reports in {args.out}")
        return 1 if failed else 0
