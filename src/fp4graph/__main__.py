"""``python -m fp4graph``: the command line the nox sessions call."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import pathlib
import sys
from collections.abc import Sequence

from . import build, config, fetch, lint, log, publish, trees
from . import stacks as stacks_module
from .errors import Fp4graphError

# Commands implemented in their own modules: name -> (module, help).
# Each module provides add_arguments(parser) and run(args) -> int.
MODULE_COMMANDS: dict[str, tuple[str, str]] = {
    "upstream": (".upstream", "PR-ready branches, format-patch output and PR bodies from a series"),
    "drift": (".drift", "classify every patch against every upstream release"),
    "rebase": (".carry", "carry a series from one upstream version to another"),
    "suites": (
        ".verify.suites",
        "upstream's own tests from the pinned tag, patched wheel beside pristine",
    ),
    "integration": (
        ".integration.command",
        "sglang on SM120: piecewise on vs off, greedy check, bench report",
    ),
}


def settings_from_args(args: argparse.Namespace) -> config.Settings:
    """Settings from the environment, with --index-url / --find-links applied."""
    settings = config.Settings.from_env(config.find_checkout())
    if getattr(args, "index_url", None):
        settings = dataclasses.replace(settings, index_url=args.index_url)
    if getattr(args, "find_links", None):
        settings = dataclasses.replace(settings, find_links=tuple(map(pathlib.Path, args.find_links)))
    return settings


def _cmd_wheels(args: argparse.Namespace) -> int:
    manifest = build.build(settings_from_args(args), args.stack or None)
    for stack in manifest["stacks"]:  # type: ignore[attr-defined]
        print(f"{stack['name']}: " + " ".join(stack["pins"]))
    return 0


def _cmd_lint(args: argparse.Namespace) -> int:
    problems = lint.lint(settings_from_args(args).patches_dir)
    for problem in problems:
        print(problem)
    print(f"lint: {len(problems)} problem(s)")
    return 1 if problems else 0


def _cmd_publish(args: argparse.Namespace) -> int:
    uploaded = publish.publish(settings_from_args(args).wheels_dir, args.repository_url, args.simple_url)
    for name in uploaded:
        print(f"Uploaded {name}")
    return 0


def _cmd_pins(args: argparse.Namespace) -> int:
    """Print the requirements that install a built stack (from wheels/manifest.json)."""
    settings = settings_from_args(args)
    manifest_path = settings.wheels_dir / "manifest.json"
    if not manifest_path.exists():
        raise Fp4graphError(f"{manifest_path}: no such file; run `nox -s wheels` first")
    manifest = json.loads(manifest_path.read_text())
    stacks = {s["name"]: s for s in manifest["stacks"]}
    if args.stack not in stacks:
        raise Fp4graphError(
            f"{manifest_path}: stack {args.stack!r} was not built; built: {', '.join(stacks)}"
        )
    pins = list(stacks[args.stack]["pins"])
    if args.project:
        pins = [p for p in pins if p.split("==")[0] == args.project]
    if args.torch:
        torch = stacks_module.load(settings.stacks_file).stack(args.stack).torch
        if torch:
            pins.append(f"torch=={torch}")
    print("\n".join(pins))
    return 0


def _cmd_fetch(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    artifact = stacks_module.load(settings.stacks_file).artifact(args.project, args.version)
    pinned = artifact.sdist if args.sdist else artifact.file(args.file)
    if pinned is None:
        raise Fp4graphError(f"{artifact.key} pins no sdist in patches/stacks.toml")
    print(fetch.fetch(settings, artifact.project, pinned))
    return 0


def _cmd_tree(args: argparse.Namespace) -> int:
    path = trees.materialize(
        settings_from_args(args), args.project, args.version, patched=not args.pristine, filename=args.file
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

    p = sub.add_parser("pins", help="print the pins of a built stack (wheels/manifest.json)")
    p.add_argument("stack")
    p.add_argument("--project", help="only this project's pin")
    p.add_argument("--torch", action="store_true", help="add the stack's torch pin")
    p.set_defaults(func=_cmd_pins)

    p = sub.add_parser("fetch", help="download a pinned upstream file; print its cached path")
    p.add_argument("project")
    p.add_argument("version")
    p.add_argument("--file", help="which pinned wheel (for per-Python wheels)")
    p.add_argument("--sdist", action="store_true", help="the sdist instead of a wheel")
    fetch_options(p)
    p.set_defaults(func=_cmd_fetch)

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
