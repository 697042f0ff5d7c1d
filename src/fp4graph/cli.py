"""``python -m fp4graph``: the command line the nox sessions call.

The whole argparse tree lives here, with one thin adapter per command (parse, call one
library function, print, return the exit code), as pypa/wheel's ``_commands`` do.  The
library modules never see argparse or print; this module alone owns the terminal: the
``-v`` logger, the output and the exit codes (an :class:`Fp4graphError` is one
``Class: message`` line and exit 2).

A new command: a ``_name(args) -> int`` adapter and a ``_command(sub, "name", _name, help)``
block in :func:`parser` that declares its arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

from .forward import drift, pin, prs, rebase, refresh
from .integration import benchmark, command, families, matrix
from .model import config, log, projects, stacks
from .model.errors import ConfigError, Fp4graphError, SuiteError
from .model.files import write_atomic
from .verify import suites
from .wheels import build, fetch, lint, publish, trees

Adapter = Callable[[argparse.Namespace], int]


def settings_from_args(args: argparse.Namespace) -> config.Settings:
    """Settings from the environment, with --index-url / --find-links applied."""
    settings = config.Settings.from_env(config.find_checkout())
    if getattr(args, "index_url", None):
        settings = dataclasses.replace(settings, index_url=args.index_url)
    if getattr(args, "find_links", None):
        settings = dataclasses.replace(settings, find_links=tuple(map(pathlib.Path, args.find_links)))
    return settings


# --- wheels -------------------------------------------------------------------------


def _wheels(args: argparse.Namespace) -> int:
    manifest = build.build(settings_from_args(args), args.stack or None)
    for stack in manifest["stacks"]:  # type: ignore[attr-defined]
        print(f"{stack['name']}: " + " ".join(stack["pins"]))
    return 0


def _lint(args: argparse.Namespace) -> int:
    problems = lint.lint(settings_from_args(args).patches_dir)
    for problem in problems:
        print(problem)
    print(f"lint: {len(problems)} problem(s)")
    return 1 if problems else 0


def _publish(args: argparse.Namespace) -> int:
    uploaded = publish.publish(settings_from_args(args).wheels_dir, args.repository_url, args.simple_url)
    for name in uploaded:
        print(f"Uploaded {name}")
    return 0


def _pins(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    pins = build.built_pins(settings.wheels_dir, args.stack)
    if args.project:
        pins = [p for p in pins if p.split("==")[0] == args.project]
    if args.torch:
        torch = stacks.load(settings.stacks_file).stack(args.stack).torch
        if torch:
            pins.append(f"torch=={torch}")
    print("\n".join(pins))
    return 0


def _fetch(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    artifact = stacks.load(settings.stacks_file).artifact(args.project, args.version)
    pinned = artifact.sdist if args.sdist else artifact.file(args.file)
    if pinned is None:
        raise Fp4graphError(f"{artifact.key} pins no sdist in patches/stacks.toml")
    print(fetch.fetch(settings, artifact.project, pinned))
    return 0


def _tree(args: argparse.Namespace) -> int:
    path = trees.materialize(
        settings_from_args(args), args.project, args.version, patched=not args.pristine, filename=args.file
    )
    print(path)
    return 0


# --- forward ------------------------------------------------------------------------


def _upstream(args: argparse.Namespace) -> int:
    if args.push and not args.remote:
        raise Fp4graphError("--push needs an explicit --remote (a URL or a remote name of --repo)")
    settings = settings_from_args(args)
    if args.print_test_requirements:
        if not args.no_tests:
            print("\n".join(prs.test_requirements(settings, args.project, args.version)))
        return 0
    out = args.out
    if out is None:
        shown = args.version or prs.target_artifact(settings, args.project, None).version
        out = settings.wheels_dir / "upstream" / f"{args.project}-{shown}"
    result = prs.prepare(
        settings, args.project, out, version=args.version, repo=args.repo, base=args.base,
        run_checks=not args.no_checks, tools=args.tools, run_tests=not args.no_tests,
        python=args.python, tests_must_run=args.tests_must_run,
    )
    print(f"{result.project} {result.version}: series {result.series_version}, source {result.origin}")
    for pr in result.prs:
        print(f"  {pr.branch}  {pr.commit[:12]}  {pr.patch.subject}")
    for c in result.checks:
        status = "PASSED" if c.ok else c.status
        print(f"  check {c.hook}: {status} ({len(c.files)} file(s))")
    for t in result.tests:
        print(f"  test {t.path}: {t.outcome}")
    print(f"wrote {out} (summary.md, prs/*/PR.md, repo/)")
    if args.push:
        if not result.ok:
            print("not pushing: checks or tests failed", file=sys.stderr)
            return 1
        prs.push(result, args.remote, args.repo)
        print(f"pushed {len(result.prs)} branch(es) to {args.remote}")
    else:
        print("dry run: nothing pushed (use --push --remote R)")
    return 0 if result.ok else 1


def _drift(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    started = time.monotonic()
    names = args.project or projects.NAMES
    only = {p: args.release for p in names} if args.release else None
    cells, notes = drift.drift(settings, names, refresh=args.refresh, offline=args.offline, only=only)
    out = args.out or settings.wheels_dir / "reports"
    drift.write_reports(out, cells, notes)
    print(drift.text_matrix(cells) if cells else "no series to check")
    for note in notes:
        print(note)
    counts = {s: sum(c.status == s for c in cells) for s in drift.STATUSES}
    print(", ".join(f"{n} {s}" for s, n in counts.items())
          + f"; {time.monotonic() - started:.1f}s; wrote {out / 'drift.md'}, {out / 'drift.json'}")
    if args.github_issue:
        print(drift.report_to_github(settings, args.github_issue, cells))
    return 0


def _rebase(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    out = args.out or settings.patches_dir / args.project / args.to_version
    if out.exists() and not args.force:
        raise ConfigError(f"{out}: exists; pass --force to replace it or --out elsewhere")
    work = args.work_dir or pathlib.Path(tempfile.mkdtemp(prefix="fp4graph-rebase-"))
    work.mkdir(parents=True, exist_ok=True)
    results = rebase.rebase(settings, args.project, args.from_version, args.to_version, out,
                            work_dir=work, replace_work=args.force)
    human = [r for r in results if r.status != "carried"]
    for r in results:
        print(f"{r.name}: {r.status}: {r.detail}")
    unresolved = sum(r.status in ("conflict", "pending") for r in results)
    print(f"rebase: {len(results) - len(human)} carried, {len(human)} need a human "
          f"({unresolved} written as unresolved: lint and the build refuse them); "
          f"series in {out}; repositories in {work}")
    if not unresolved:
        print(f"next: `python -m fp4graph refresh {args.project} {args.to_version} --work-dir {work}` "
              "after any fix-up commit, then the simulation tests of the new version")
    return 1 if human else 0


def _refresh(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    if (args.repo is None) == (args.work_dir is None):
        raise ConfigError("refresh needs one of --work-dir (rebase's) or --repo")
    repo = args.repo or args.work_dir / f"to-{args.version}"
    out = args.out or settings.patches_dir / args.project / args.version
    results = refresh.refresh(args.project, args.version, repo, out, base=args.base, drop=args.drop)
    for r in results:
        print(f"{r.name}: {r.status}: {r.topic}: {r.detail}")
    changed = sum(r.status != "unchanged" for r in results)
    print(f"refresh: {len(results)} patch(es), {changed} changed; series in {out}")
    if changed:
        print("bump `revision` in patches/stacks.toml if this version was ever published")
    return 0


def _pin(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    result = pin.pin(settings, args.project, args.version, stack=not args.no_stack)
    for artifact in result.artifacts:
        files = [*artifact.files, *([artifact.sdist] if artifact.sdist else [])]
        print(f"pinned {artifact.key}: " + ", ".join(f.filename for f in files))
    for key in result.existing:
        print(f"{key}: already pinned, identical")
    if result.stack:
        print(f"stack {result.stack}" + (f" (torch {result.torch})" if result.torch else ""))
    print(f"wrote {result.stacks_file}" if result.artifacts or result.stack else "nothing to write")
    return 0

# --- verify -------------------------------------------------------------------------


def _suites(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    started = time.time()
    with contextlib.ExitStack() as cleanup:
        work = args.work or pathlib.Path(
            cleanup.enter_context(tempfile.TemporaryDirectory(prefix="fp4graph-suites-"))
        )
        work.mkdir(parents=True, exist_ok=True)
        if args.bundle:
            bundles = suites.open_bundles(settings, args.bundle, work)
        else:
            stack = args.stack or os.environ.get("FP4GRAPH_STACK") or "sglang-0.5.9"
            runs_here = not (args.pack or args.requirements)
            plan = suites.plan(settings, stack, args.project or (),
                               cuda=suites.cuda_available() if runs_here else None)
            for note in plan.skipped:
                print(f"suites: {stack}: skip {note}")
            if args.requirements:
                reqs = suites.requirements(settings, stack, plan.projects, args.torch)
                write_atomic(args.requirements, "\n".join(reqs) + "\n")
                print(f"{args.requirements}: {len(reqs)} requirements for {', '.join(plan.projects)}")
                return 0
            if not plan.projects:
                print("suites: nothing to run here")
                return 0
            bundles = suites.prepare_stack(settings, plan, work, repos=_repos(args.repo, plan.projects),
                                           patched=args.patched)
            if args.pack:
                for bundle in bundles:
                    packed = suites.pack(bundle, args.pack / f"{bundle.name}.tar.xz")
                    print(f"{packed}  {packed.stat().st_size / 1e6:.1f} MB  "
                          f"{len(bundle.manifest['files'])} files, upstream {bundle.manifest['source']['tag']}")
                return 0
        options = suites.RunOptions(
            budget_s=args.budget, budget_scale=args.budget_scale,
            deadline=started + args.deadline if args.deadline else None,
            files=tuple(args.file), areas=tuple(args.area), jit_cache=args.jit_cache,
            pytest_args=tuple(args.pytest_arg),
        )
        failed, compared = False, 0
        for bundle in bundles:
            report = suites.gate_bundle(bundle, work, options, args.out,
                                        command=subprocess.list2cmdline(sys.argv))
            print(suites.markdown(report))
            failed |= not report["ok"]
            compared += report["files_compared"]
    verdict = "FAILED" if failed else ("ok" if compared else "ok, but nothing was compared")
    print(f"suites: {verdict} ({time.time() - started:.0f} s); reports in {args.out}")
    return 1 if failed else 0


def _repos(values: Sequence[str], projects: Sequence[str]) -> dict[str, pathlib.Path]:
    """``--repo [PROJECT=]PATH`` values; a bare PATH needs exactly one project."""
    repos: dict[str, pathlib.Path] = {}
    for value in values:
        project, sep, path = value.rpartition("=")
        if not sep:
            if len(projects) != 1:
                raise SuiteError(f"--repo {value}: say which project (--repo PROJECT=PATH) or pass one --project")
            project = projects[0]
        repos[project] = pathlib.Path(path).expanduser()
    return repos


# --- integration --------------------------------------------------------------------


def _integration(args: argparse.Namespace) -> int:
    return command.run(args)


def _concurrency(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: concurrency levels must be >= 1")
    return levels


# --- the tree -----------------------------------------------------------------------


def _command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, run: Adapter, help: str
) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description=help)
    p.set_defaults(func=run)
    return p


def _index_options(p: argparse.ArgumentParser, *, find_links: bool = True) -> None:
    """Where upstream files come from (the settings' index_url / find_links)."""
    p.add_argument("--index-url", help="simple index of the upstream files (default PyPI)")
    p.add_argument(
        "--find-links", action="append",
        help="directory of upstream files to use first" if find_links else argparse.SUPPRESS,
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="fp4graph", description="``python -m fp4graph``: the command line the nox sessions call."
    )
    top.add_argument("-v", "--verbose", action="store_true", help="print each step")
    sub = top.add_subparsers(dest="command", required=True)

    p = _command(sub, "wheels", _wheels, "build the patched wheels and the index into wheels/")
    p.add_argument("--stack", action="append", help="build only this stack (repeatable)")
    _index_options(p)

    _command(sub, "lint", _lint, "check stacks.toml, series files and DEP-3 headers")

    p = _command(sub, "publish", _publish, "upload wheels/ with twine (never overwrites)")
    p.add_argument("repository_url", help="upload URL, e.g. http://127.0.0.1:8080/")
    p.add_argument("--simple-url", help="the index's simple URL (default <repository-url>/simple/)")

    p = _command(sub, "pins", _pins, "print the pins of a built stack (wheels/manifest.json)")
    p.add_argument("stack")
    p.add_argument("--project", help="only this project's pin")
    p.add_argument("--torch", action="store_true", help="add the stack's torch pin")

    p = _command(sub, "fetch", _fetch, "download a pinned upstream file; print its cached path")
    p.add_argument("project")
    p.add_argument("version")
    p.add_argument("--file", help="which pinned wheel (for per-Python wheels)")
    p.add_argument("--sdist", action="store_true", help="the sdist instead of a wheel")
    _index_options(p)

    p = _command(sub, "tree", _tree, "print the path of an unpacked pristine or patched wheel")
    p.add_argument("project")
    p.add_argument("version")
    p.add_argument("--pristine", action="store_true")
    p.add_argument("--file", help="which pinned wheel (for per-Python wheels)")
    _index_options(p)

    p = _command(sub, "upstream", _upstream,
                 "PR-ready branches, format-patch output and PR bodies from a series")
    p.add_argument("project", choices=projects.NAMES)
    p.add_argument("--version", help="upstream version (default: the newest pinned one)")
    p.add_argument("--repo", type=pathlib.Path, help="a local clone of upstream (default: the pinned sdist)")
    p.add_argument("--base", help="commit to apply the series on (default: tag v<version>)")
    p.add_argument("--out", type=pathlib.Path,
                   help="output directory (default wheels/upstream/<project>-<version>)")
    p.add_argument("--no-checks", action="store_true", help="skip upstream's pre-commit checks")
    p.add_argument("--tools", choices=("auto", "path"), default="auto",
                   help="auto: install the pinned check tools into cached venvs; path: use PATH")
    p.add_argument("--no-tests", action="store_true", help="do not run the tests the patches add")
    p.add_argument("--python", default=sys.executable, help="interpreter for those tests")
    p.add_argument("--tests-must-run", action="store_true",
                   help="a test that cannot run (a module missing) fails the command")
    p.add_argument("--print-test-requirements", action="store_true",
                   help="print what those tests need installed (besides torch) and exit")
    p.add_argument("--push", action="store_true", help="push the PR branches (needs --remote)")
    p.add_argument("--remote", help="where to push: a URL or a remote name of --repo")
    _index_options(p)

    p = _command(sub, "drift", _drift, "classify every patch against every upstream release")
    p.add_argument("--project", action="append", choices=projects.NAMES,
                   help="check only this project (repeatable; default both)")
    p.add_argument("--release", action="append", metavar="VERSION",
                   help="check only this release (repeatable; with one --project)")
    p.add_argument("--out", type=pathlib.Path, help="report directory (default wheels/reports)")
    p.add_argument("--refresh", action="store_true", help="re-read the release list now")
    p.add_argument("--offline", action="store_true", help="use only the cache")
    p.add_argument("--github-issue", metavar="LABEL",
                   help="open or update the open issue with this label when patches drift")
    _index_options(p, find_links=False)

    p = _command(sub, "pin", _pin,
                 "pin a release from the index (files + sha256, its stack) into stacks.toml")
    p.add_argument("project", choices=projects.NAMES)
    p.add_argument("version")
    p.add_argument("--no-stack", action="store_true", help="pin the artifacts only")
    _index_options(p, find_links=False)

    p = _command(sub, "rebase", _rebase, "carry a series from one upstream version to another")
    p.add_argument("project", choices=projects.NAMES)
    p.add_argument("from_version", help="the version whose series to carry (A)")
    p.add_argument("to_version", help="the pinned version to carry it to (B)")
    p.add_argument("--out", type=pathlib.Path,
                   help="where to write B's series (default patches/<project>/<B>/; refused if it exists)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out and the work repositories of an earlier run")
    p.add_argument("--work-dir", type=pathlib.Path, help="keep the git repositories here")
    _index_options(p)

    p = _command(sub, "refresh", _refresh,
                 "write a rebase work repository's commits back as the series (after resolving)")
    p.add_argument("project", choices=projects.NAMES)
    p.add_argument("version", help="the version whose series to write")
    p.add_argument("--work-dir", type=pathlib.Path, help="rebase's --work-dir (uses its to-<version>/)")
    p.add_argument("--repo", type=pathlib.Path, help="any repository whose commits are the series")
    p.add_argument("--base", help=f"the pristine commit (default {rebase.BASE_REF})")
    p.add_argument("--out", type=pathlib.Path, help="where to write (default patches/<project>/<version>/)")
    p.add_argument("--drop", action="append", default=[], metavar="TOPIC",
                   help="drop this topic of the old series on purpose (repeatable)")

    p = _command(sub, "suites", _suites,
                 "upstream's own tests from the pinned tag, patched wheel beside pristine")
    p.description = (
        "Run upstream's own tests, from the tag pinned in patches/stacks.toml, against the "
        "patched wheel beside the pristine one; fail on a test that passes pristine and fails "
        "patched."
    )
    p.add_argument("stack", nargs="?", help="a stack of patches/stacks.toml (default sglang-0.5.9)")
    p.add_argument("--project", action="append", choices=sorted(suites.SELECTIONS),
                   help="only this project's selection (repeatable; default: every one in the stack)")
    p.add_argument("--repo", action="append", default=[], metavar="[PROJECT=]PATH",
                   help="a local clone of upstream (with its tags) instead of GitHub")
    p.add_argument("--patched", type=pathlib.Path, help="the patched wheel (default: built by the engine)")
    p.add_argument("--bundle", action="append", type=pathlib.Path, default=[],
                   help="run a prepared bundle (directory or .tar.xz) instead of preparing one")
    p.add_argument("--pack", type=pathlib.Path, metavar="DIR",
                   help="prepare the bundles, write them as DIR/<project>-<version>.tar.xz, run nothing")
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("wheels/reports/suites"),
                   help="where report.md / report.json go (default wheels/reports/suites)")
    p.add_argument("--work", type=pathlib.Path, help="working directory (default: a temporary one)")
    p.add_argument("--file", action="append", default=[], help="only files matching (fnmatch)")
    p.add_argument("--area", action="append", default=[], help="only files whose area contains this")
    p.add_argument("--budget", type=float, help="seconds per file and install (overrides the table)")
    p.add_argument("--budget-scale", type=float, default=1.0, help="multiply the table's budgets")
    p.add_argument("--deadline", type=float, help="seconds for the whole command")
    p.add_argument("--jit-cache", choices=("auto", "shared", "separate"), default="auto",
                   help="one JIT cache for both installs when they differ in Python files only (auto)")
    p.add_argument("--pytest-arg", action="append", default=[], help="extra pytest argument")
    p.add_argument("--requirements", type=pathlib.Path, metavar="FILE",
                   help="write the test interpreter's requirements to FILE and exit")
    p.add_argument("--torch", help="torch version for --requirements (default: the stack's pin)")

    p = _command(sub, "integration", _integration,
                 "sglang on SM120: the model-family matrix, piecewise on vs off, greedy check, bench report")
    p.add_argument("--stack", required=True, help="stack from patches/stacks.toml, e.g. sglang-0.5.9")
    cells = p.add_argument_group("matrix (each option repeatable; default: every value)")
    cells.add_argument("--family", action="append", choices=sorted(families.FAMILIES), help="model family")
    cells.add_argument("--start-order", action="append", choices=[s.value for s in matrix.StartOrder],
                       help="default (decode CUDA graphs first) or no-cuda-graph (--disable-cuda-graph)")
    cells.add_argument("--moe-runner-backend", action="append", choices=matrix.MOE_BACKENDS,
                       help="MoE families: sglang's MoE runner backend")
    cells.add_argument("--shared-experts-fusion", action="append", choices=[f.value for f in matrix.Fusion],
                       help="families with a shared expert: sglang's shared-experts fusion on or off")
    p.add_argument("--model-path", type=pathlib.Path,
                   help="an NVFP4 checkpoint of a known family instead of the generated ones")
    p.add_argument("--wheels-dir", type=pathlib.Path, help="patched wheels (default <repo>/wheels)")
    p.add_argument("--index-url", help="index serving the patched wheels (added to PyPI)")
    p.add_argument("--tp", type=int, default=1, help="tensor parallel size (default 1)")
    p.add_argument("--concurrency", type=_concurrency, default=benchmark.CONCURRENCY,
                   help="bench_serving concurrency levels (default 1,10,256,1024)")
    p.add_argument("--bench", choices=command.BENCH_CHOICES, default="primary",
                   help="cells to benchmark: primary (MoE backend auto, fusion on; both start orders), "
                        "all, none (default primary)")
    p.add_argument("--skip-bench", action="store_true", help="same as --bench none")
    p.add_argument("--input-len", type=int, default=1024, help="prompt tokens per request")
    p.add_argument("--output-len", type=int, default=256, help="generated tokens per request")
    p.add_argument("--prompts-per-level", type=int, default=2,
                   help="num prompts = max(8, this x concurrency)")
    p.add_argument("--output", type=pathlib.Path,
                   help="report dir (default <repo>/wheels/reports/integration)")
    p.add_argument("--work-dir", type=pathlib.Path,
                   help="venvs, checkpoints (default the fp4graph cache)")
    p.add_argument("--python", default=sys.executable, help="interpreter the venvs are made from")
    p.add_argument("--sglang-checkout", type=pathlib.Path,
                   help="sglang clone at the pinned tag: also run its piecewise test file")
    p.add_argument("--server-timeout", type=float, default=1800, help="seconds to wait for health")
    p.add_argument("--server-arg", action="append", default=[], help="extra launch_server argument")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    p.add_argument("--device-check", action="store_true",
                   help="only check for the SM120 GPUs the run needs (prints the skip line)")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.verbose or os.environ.get("FP4GRAPH_VERBOSE"):
        log.LOGGER.set(lambda message: print(f"* {message}", file=sys.stderr))
    try:
        return int(args.func(args))
    except Fp4graphError as exc:
        print(f"{exc.__class__.__name__}: {exc}", file=sys.stderr)
        return 2
