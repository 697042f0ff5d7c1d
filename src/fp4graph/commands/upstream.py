"""``python -m fp4graph upstream``: PR-ready branches, format-patch output and PR bodies."""

from __future__ import annotations

import argparse
import pathlib
import sys

from ..forward import prs
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
    p.add_argument("--base", help="commit to apply the series on (default: tag v<version>)")
    p.add_argument("--out", type=pathlib.Path,
                   help="output directory (default wheels/upstream/<project>-<version>)")
    p.add_argument("--no-checks", action="store_true", help="skip upstream's pre-commit checks")
    p.add_argument("--tools", choices=("auto", "path"), default="auto",
                   help="auto: install the pinned check tools into cached venvs; path: use PATH")
    p.add_argument("--no-tests", action="store_true", help="do not run the tests the patches add")
    p.add_argument("--python", default=sys.executable, help="interpreter for those tests")
    p.add_argument("--tests-must-run", action="store_true",
                   help="a test that cannot run (a module missing) or skips all it has fails the command")
    p.add_argument("--print-test-requirements", action="store_true",
                   help="print what those tests need installed and exit (torch only where they "
                        "need the release's own pin: sglang's)")
    p.add_argument("--push", action="store_true", help="push the PR branches (needs --remote)")
    p.add_argument("--remote", help="where to push: a URL or a remote name of --repo")
    common.add_index_options(p)


def run(args: argparse.Namespace) -> int:
    if args.push and not args.remote:
        raise Fp4graphError("--push needs an explicit --remote (a URL or a remote name of --repo)")
    settings = common.settings(args)
    if args.print_test_requirements:
        if not args.no_tests:
            print("\n".join(prs.test_requirements(settings, args.project, args.version)))
        return 0
    options = prs.UpstreamOptions(
        project=args.project, version=args.version, repo=args.repo, base=args.base, out=args.out,
        run_checks=not args.no_checks, tools=args.tools, run_tests=not args.no_tests, python=args.python,
        tests_must_run=args.tests_must_run, push_to=args.remote if args.push else None,
    )
    done = prs.run_upstream(settings, options)
    result = done.prepared
    print(f"{result.project} {result.version}: series {result.series_version}, source {result.origin}")
    for pr in result.prs:
        print(f"  {pr.branch}  {pr.commit[:12]}  {pr.patch.subject}")
    for c in result.checks:
        status = "PASSED" if c.ok else c.status
        print(f"  check {c.hook}: {status} ({len(c.files)} file(s))")
    for t in result.tests:
        print(f"  test {t.path}: {t.outcome}")
    print(f"wrote {done.out} (summary.md, prs/*/PR.md, repo/)")
    if done.push_refused:
        print(f"not pushing: {done.push_refused}", file=sys.stderr)
        return 1
    if done.push_failure is not None:
        raise done.push_failure
    if done.pushed:
        print(f"pushed {len(result.prs)} branch(es) to {args.remote}")
    else:
        print("dry run: nothing pushed (use --push --remote R)")
    return 0 if result.ok else 1
