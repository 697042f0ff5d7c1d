"""``fp4graph suites`` as one call: plan, prepare (or open) the bundles, check, run, judge.

:func:`run_suites` takes what the command line asked (:class:`SuitesOptions`) and returns a
:class:`SuitesResult`: the verdict, the exit code it implies and the lines the command prints.
The verdict is the worst of the bundles': a regression fails; so does an inconclusive run (a
file that crashed in both installs or collected in neither, pristine passing none of a file's
tests, or a bundle that compared nothing), since it proves nothing about the wheel; a
machine that cannot run a bundle's tests (no GPU) skips it and says why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import pathlib
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from ...model import config
from ...model.errors import SuiteError
from ...model.files import write_atomic
from ...model.stacks import DEFAULT_STACK
from . import report
from .bundle import Bundle, pack
from .gate import check_requirements, gate_bundle, open_bundles, plan, prepare_stack
from .prepare import requirements
from .run import RunOptions, no_gpu_reason, probe_device


class Verdict(enum.Enum):
    OK = "ok"  # every bundle that ran checked tests, and none regressed
    REGRESSION = "FAILED"  # a test passes pristine and fails patched
    INCONCLUSIVE = "INCONCLUSIVE"  # a file or a bundle proves nothing about the wheel
    SKIPPED = "skipped"  # nothing could run here (e.g. no GPU)
    PACKED = "packed"  # --pack: bundles written, nothing run
    REQUIREMENTS = "requirements"  # --requirements: the list written, nothing run

    @property
    def exit_code(self) -> int:
        return 1 if self in (Verdict.REGRESSION, Verdict.INCONCLUSIVE) else 0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SuitesOptions:
    stack: str = DEFAULT_STACK  # unused with ``bundles``
    projects: tuple[str, ...] = ()  # default: every project of the stack with a selection
    repos: tuple[str, ...] = ()  # ``[PROJECT=]PATH``: local clones instead of GitHub
    patched: pathlib.Path | None = None  # the patched wheel (one project) instead of a build
    bundles: tuple[pathlib.Path, ...] = ()  # prepared bundles to run instead of preparing
    pack: pathlib.Path | None = None  # write the bundles as DIR/<project>-<version>.tar.xz
    requirements: pathlib.Path | None = None  # write the test interpreter's requirements
    torch: str | None = None  # torch version for ``requirements`` (default: the stack's pin)
    out: pathlib.Path = pathlib.Path("wheels/reports/suites")
    work: pathlib.Path | None = None  # default: a temporary directory
    deadline_s: float | None = None  # seconds for the whole call
    run: RunOptions = RunOptions()
    command: str = ""  # recorded in each report


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PackedBundle:
    path: pathlib.Path
    size: int
    files: int
    tag: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SuitesResult:
    verdict: Verdict
    out: pathlib.Path
    wall_s: float
    stack: str | None = None
    projects: tuple[str, ...] = ()  # those planned (not with bundles)
    skipped: tuple[str, ...] = ()  # "PROJECT: why" for each project or bundle not run here
    reports: tuple[dict[str, Any], ...] = ()
    packed: tuple[PackedBundle, ...] = ()
    requirements: tuple[str, ...] = ()
    requirements_file: pathlib.Path | None = None

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    def lines(self) -> list[str]:
        """What ``fp4graph suites`` prints: skips, reports, and one verdict line last."""
        where = f"{self.stack}: " if self.stack else ""
        lines = [f"suites: {where}skip {note}" for note in self.skipped]
        if self.verdict is Verdict.REQUIREMENTS:
            return [*lines, f"{self.requirements_file}: {len(self.requirements)} requirements for "
                    + ", ".join(self.projects)]
        if self.verdict is Verdict.PACKED:
            return [*lines, *(f"{p.path}  {p.size / 1e6:.1f} MB  {p.files} files, upstream {p.tag}"
                              for p in self.packed)]
        lines += [report.markdown(r) for r in self.reports]
        if any(r["inconclusive"] for r in self.reports):
            lines.append("suites: a file that crashes in both installs, or that pristine cannot pass, "
                         "points at the environment (a test requirement, the driver, the GPU), not the "
                         "wheel: each crash's output is in its report")
        return [*lines, f"suites: {self._verdict_text()} ({self.wall_s:.0f} s)"
                + (f"; reports in {self.out}" if self.reports else "")]

    def _verdict_text(self) -> str:
        def named(r: dict[str, Any]) -> str:
            return f"{r['project']} {r['version']}"

        undecided = [
            f"{named(r)}: " + (report.undecided_files(r) if r["inconclusive"] else
                               "nothing compared (no test passed pristine and ran patched)")
            for r in self.reports if r["inconclusive"] or r["verdict"] == "inconclusive"
        ]
        if self.verdict is Verdict.SKIPPED:
            return "skipped: nothing to run here"
        if self.verdict is Verdict.REGRESSION:
            failed = [
                f"{named(r)}: " + ", ".join(f["path"] for f in r["files"] if f["status"] == "regression")
                for r in self.reports if r["verdict"] == "regression"
            ]
            return ("FAILED, a test passes pristine and fails patched (or a file collects only "
                    "pristine) in " + "; ".join(failed)
                    + ("; also INCONCLUSIVE: " + "; ".join(undecided) if undecided else ""))
        if self.verdict is Verdict.INCONCLUSIVE:
            return "INCONCLUSIVE, nothing proven about the wheel in " + "; ".join(undecided)
        checked = sum(r["checked"] for r in self.reports)
        files = sum(r["files_compared"] for r in self.reports)
        return f"ok: no regression, {checked} test(s) checked in {files} file(s)"


def parse_repos(values: Sequence[str], projects: Sequence[str]) -> dict[str, pathlib.Path]:
    """``[PROJECT=]PATH`` values; a bare PATH needs exactly one project."""
    repos: dict[str, pathlib.Path] = {}
    for value in values:
        project, sep, path = value.rpartition("=")
        if not sep:
            if len(projects) != 1:
                raise SuiteError(f"--repo {value}: say which project (--repo PROJECT=PATH) or pass one --project")
            project = projects[0]
        repos[project] = pathlib.Path(path).expanduser()
    return repos


def _verdict(reports: Sequence[dict[str, Any]]) -> Verdict:
    verdicts = {r["verdict"] for r in reports}
    if "regression" in verdicts:
        return Verdict.REGRESSION
    if "inconclusive" in verdicts:
        return Verdict.INCONCLUSIVE
    return Verdict.OK if "ok" in verdicts else Verdict.SKIPPED


def run_suites(settings: config.Settings, options: SuitesOptions) -> SuitesResult:
    """Do what ``options`` ask: write the requirements, pack bundles, or run the gate."""
    started = time.time()
    with contextlib.ExitStack() as cleanup:
        work = options.work or pathlib.Path(
            cleanup.enter_context(tempfile.TemporaryDirectory(prefix="fp4graph-suites-"))
        )
        work.mkdir(parents=True, exist_ok=True)
        python = options.run.python
        skipped: list[str] = []
        stack: str | None = None
        if options.bundles:
            bundles = open_bundles(settings, options.bundles, work)
        else:
            stack = options.stack
            runs_here = not (options.pack or options.requirements)
            planned = plan(settings, stack, options.projects,
                           cuda=bool(probe_device(python).get("cuda_available")) if runs_here else None)
            skipped += planned.skipped
            if options.requirements:
                reqs = requirements(settings, stack, planned.projects, options.torch)
                write_atomic(options.requirements, "\n".join(reqs) + "\n")
                return SuitesResult(verdict=Verdict.REQUIREMENTS, out=options.out, stack=stack,
                                    projects=planned.projects,
                                    wall_s=time.time() - started, skipped=tuple(skipped),
                                    requirements=tuple(reqs), requirements_file=options.requirements)
            bundles = prepare_stack(settings, planned, work, patched=options.patched,
                                    repos=parse_repos(options.repos, planned.projects))
            if options.pack:
                return SuitesResult(verdict=Verdict.PACKED, out=options.out, stack=stack,
                                    wall_s=time.time() - started, skipped=tuple(skipped),
                                    packed=tuple(_pack(b, options.pack) for b in bundles))
        runnable = []
        for bundle in bundles:
            why = no_gpu_reason(bundle, probe_device(python))
            if why:
                skipped.append(f"{bundle.name} ({bundle.path}): {why}")
            else:
                runnable.append(bundle)
        check_requirements(runnable, python)
        deadline = started + options.deadline_s if options.deadline_s else None
        run_options = dataclasses.replace(options.run, deadline=deadline)
        reports = tuple(gate_bundle(b, work, run_options, options.out, command=options.command)
                        for b in runnable)
    return SuitesResult(verdict=_verdict(reports), out=options.out, stack=stack,
                        wall_s=time.time() - started, skipped=tuple(skipped), reports=reports)


def _pack(bundle: Bundle, dest_dir: pathlib.Path) -> PackedBundle:
    packed = pack(bundle, dest_dir / f"{bundle.name}.tar.xz")
    return PackedBundle(path=packed, size=packed.stat().st_size, files=len(bundle.manifest["files"]),
                        tag=bundle.manifest["source"]["tag"])
