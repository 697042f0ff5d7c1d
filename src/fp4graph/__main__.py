"""``python -m fp4graph``: the command line the nox sessions call."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import pathlib
import sys
from collections.abc import Sequence

from . import build, config, lint, log, publish, trees
from .errors import Fp4graphError

# Commands implemented in their own modules: name -> (module, help).
# Each module provides add_arguments(parser) and run(args) -> int.
MODULE_COMMANDS: dict[str, tuple[str, str]] = {}


def _repo_root() -> pathlib.Path:
    here = pathlib.Path.cwd()
    for candidate in (here, *here.parents):
        if (candidate / "patches" / "stacks.toml").is_file():
            return candidate
    raise Fp4graphError(f"{here}: not inside an fp4graph checkout (no patches/stacks.toml)")


def _settings(args: argparse.Namespace) -> config.Settings:
    settings = config.Settings.from_env(_repo_root())
    if getattr(args, "index_url", None):
        settings = dataclasses.replace(settings, index_url=args.index_url)
    if getattr(args, "find_links", None):
        settings = dataclasses.replace(settings, find_links=tuple(map(pathlib.Path, args.find_links)))
    return settings


def _cmd_wheels(args: argparse.Namespace) -> int:
    manifest = build.build(_settings(args), args.stack or None)
    for stack in manifest["stacks"]:  # type: ignore[attr-defined]
        print(f"{stack['name']}: " + " ".join(stack["pins"]))
    return 0


def _cmd_lint(args: argparse.Namespace) -> int:
    problems = lint.lint(_settings(args).patches_dir)
    for problem in problems:
        print(problem)
    print(f"lint: {len(problems)} problem(s)")
    return 1 if problems else 0


def _cmd_publish(args: argparse.Namespace) -> int:
    uploaded = publish.publish(_settings(args).wheels_dir, args.repository_url, args.simple_url)
    for name in uploaded:
        print(f"Uploaded {name}")
    return 0


def _cmd_tree(args: argparse.Namespace) -> int:
    path = trees.materialize(
        _settings(args), args.project, args.version, patched=not args.pristine, filename=args.file
    )
    print(path)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fp4graph", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="print each step")
    sub = parser.add_subparsers(dest="command", required=True)

    def fetch_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--index-url", help="simple index to fetch upstream files from (default PyPI)")
        p.add_argument("--find-links", action="append", help="directory of upstream files to use first")

    p = sub.add_parser("wheels", help="build the patched wheels and the index into wheels/")
    p.add_argument("--stack", action="append", help="build only this stack (repeatable)")
    fetch_options(p)
    p.set_defaults(func=_cmd_wheels)

    p = sub.add_parser("lint", help="check stacks.toml, series files and DEP-3 headers")
    p.set_defaults(func=_cmd_lint)

    p = sub.add_parser("publish", help="upload wheels/ with twine (never overwrites)")
    p.add_argument("repository_url", help="upload URL, e.g. http://127.0.0.1:8080/")
    p.add_argument("--simple-url", help="the index's simple URL (default <repository-url>/simple/)")
    p.set_defaults(func=_cmd_publish)

    p = sub.add_parser("tree", help="print the path of an unpacked pristine or patched wheel")
    p.add_argument("project")
    p.add_argument("version")
    p.add_argument("--pristine", action="store_true")
    p.add_argument("--file", help="which pinned wheel (for per-Python wheels)")
    fetch_options(p)
    p.set_defaults(func=_cmd_tree)

    for name, (module_name, help_text) in MODULE_COMMANDS.items():
        module = importlib.import_module(module_name, __package__)
        p = sub.add_parser(name, help=help_text)
        module.add_arguments(p)
        p.set_defaults(func=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.verbose or os.environ.get("FP4GRAPH_VERBOSE"):
        log.LOGGER.set(lambda message: print(f"* {message}", file=sys.stderr))
    try:
        return int(args.func(args))
    except Fp4graphError as exc:
        print(f"{exc.__class__.__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
