"""``python -m fp4graph upstream``: PR-ready branches, format-patch output and PR bodies."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

from ..forward import prreport, prs
from ..forward.sources import user_identity
from ..model import projects
from ..model.errors import Fp4graphError
from . import common

NAME = "upstream"
HELP = "PR-ready branches, format-patch output and PR bodies from a series"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    p = parser
    p.add_argument("project", choices=projects.NAMES)
    p.add_argument("--version", help="upstream version (default: the newest pinned one)")
    p.add_argument("--repo", type=pathlib.Path, help="a local clone of upstream (default: the pinned sdist)")
    p.add_argument("--base", help="commit to apply the series on (default: tag v<version>; with a "
                   "pull-request series, the clone's branch the series targets, e.g. main)")
    p.add_argument("--series", help="the pull-request series to use (default: the project's last "
                   "[[pull-requests]] entry; used with --repo)")
    p.add_argument("--out", type=pathlib.Path,
                   help="output directory (default wheels/upstream/<project>-<version>)")
    p.add_argument("--no-checks", action="store_true", help="skip upstream's pre-commit checks")
    p.add_argument("--tools", choices=("auto", "path"), default="auto",
                   help="auto: install the pinned check tools into cached venvs; path: use PATH")
    p.add_argument("--no-tests", action="store_true", help="do not run the tests the patches add")
    p.add_argument("--python", default=sys.executable, help="interpreter for those tests")
    p.add_argument("--tests-must-run", action="store_true",
                   help="a test that cannot run (a module missing) or skips all it has fails the command")
    p.add_argument("--simulated-gpu", action="store_true",
                   help="run those tests with torch's device queries answered as an SM120 card "
                   "(reported as simulation; with --repo the default where torch sees no GPU)")
    p.add_argument("--print-test-requirements", action="store_true",
                   help="print what those tests need installed and exit (torch only where they "
                        "need the release's own pin: sglang's)")
    p.add_argument("--author", help="'Name <email>' of the pull-request commits (default: your git "
                   "identity, user.name and user.email)")
    p.add_argument("--release-tree", metavar="VERSION",
                   help="with a pull-request series: also apply each pull request (zero fuzz; the re-cut "
                   "in <series>/release-VERSION/ where there is one) to that pinned release's sdist, with "
                   "the series commit's tests and hook config beside it, and run its tests with and "
                   "without it (must pass / fail)")
    p.add_argument("--push", action="store_true", help="push the PR branches (needs --remote)")
    p.add_argument("--remote", help="where to push: a URL or a remote name of --repo")
    common.add_index_options(p)


def run(args: argparse.Namespace) -> int:
    if args.push and not args.remote:
        raise Fp4graphError("--push needs an explicit --remote (a URL or a remote name of --repo)")
    settings = common.settings(args)
    options = prs.UpstreamOptions(
        project=args.project, version=args.version, repo=args.repo, series=args.series, base=args.base,
        out=args.out, run_checks=not args.no_checks, tools=args.tools, run_tests=not args.no_tests,
        python=args.python, tests_must_run=args.tests_must_run,
        simulated_gpu=True if args.simulated_gpu else None,
        push_to=args.remote if args.push else None, release_tree=args.release_tree,
    )
    if args.print_test_requirements:
        print("\n".join(prs.test_requirements(settings, options)))
        return 0
    options = dataclasses.replace(options, identity=user_identity(args.author, args.repo))
    done = prs.run_upstream(settings, options)
    _print(done.report)
    print(f"wrote {done.out} (summary.md, prs/*/PR.md, repo/)")
    if done.push_refused:
        print(f"not pushing: {done.push_refused}", file=sys.stderr)
        return 1
    if done.push_failure is not None:
        raise done.push_failure
    if done.pushed:
        print(f"pushed {len(done.report.prs)} branch(es) to {args.remote}")
    else:
        print("dry run: nothing pushed (use --push --remote R)")
    return 0 if done.report.ok else 1


def _print(report: prreport.Report) -> None:
    print(f"{report.title}: branches on {report.base_note}; source {report.source_note}")
    for carried in report.carried:
        if carried.status != "carried":
            print(f"  carry {carried.patch.name}: {carried.status}: {carried.detail}")
    for name, why in report.not_proposed:
        print(f"  not proposed {name}: {why}")
    if report.stack_import is not None:
        print(f"  with every pull request applied: {'' if report.stack_import[0] else 'FAILED: '}"
              f"{report.stack_import[1]}")
    if report.release_tree:
        print(f"  release tree {report.release_tree} ({report.release_tree_seconds or 0:.0f} s):")
        for pr in report.prs:
            rt = pr.release_tree
            shown = "not checked" if rt is None else (
                f"{'ok' if rt.ok else 'FAILED ' + rt.status}{' (re-cut)' if rt.recut else ''}: {rt.detail}")
            print(f"    {pr.patch.name}: {shown}")
    if not report.prs:
        print("  no pull request: every patch is carried downstream or waits (not proposed above)")
    for pr in report.prs:
        print(f"  {pr.branch.name}  {pr.branch.status}  +{pr.added_lines}/-{pr.removed_lines}  "
              f"on {pr.branch.stacked_on or ('+'.join(pr.branch.needs) or 'upstream')}  {pr.patch.subject}")
        for c in pr.checks:
            print(f"    check {c.hook}: {'PASSED' if c.ok else c.status} ({len(c.files)} file(s))")
        for t in pr.tests:
            print(f"    test {t.path}: {t.outcome}; without the change: {pr.outcome_without(t.path)}")
        for case in pr.passing_without_change():
            print(f"    {'FLAG' if pr.shows_no_fix else 'note'} {case}: passes without the change")
        if pr.shows_no_fix:
            print("    FLAGGED: no test of this pull request fails without its change")
