"""``python -m fp4graph install``: install a stack as the README says, then check it imports."""

from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import shutil
import sys
import tempfile

from ..install import stack as install
from ..model import config, locks
from ..model.files import write_atomic

NAME = "install"
HELP = "install a stack from the built index + PyPI with its lock; pip check; import smoke"

# The README's install command shows this index (`--print-command` with it).
README_INDEX = "https://pypi.internal/simple/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stack", help="a built stack with sglang, e.g. sglang-0.5.9")
    parser.add_argument("--index-url", help="an index serving our wheels and PyPI's (default: wheels/ "
                                            "served on 127.0.0.1, PyPI as the extra index)")
    parser.add_argument("--extra-index-url", action="append",
                        help=f"indexes for everything else (default {install.PYPI} with the served wheels/, "
                             "none with --index-url)")
    parser.add_argument("--no-lock", action="store_true",
                        help="install without the stack's lock (what PyPI's newest versions do)")
    parser.add_argument("--lock", type=pathlib.Path, help="the lock (default patches/locks/<stack>.txt)")
    parser.add_argument("--installer", choices=install.INSTALLERS, default="pip")
    parser.add_argument("--venv", type=pathlib.Path,
                        help="where to make the venv (default a temporary one, removed afterwards)")
    parser.add_argument("--keep", action="store_true", help="keep the --venv")
    parser.add_argument("--python", default=sys.executable, help="the interpreter the venv is made from")
    parser.add_argument("--keep-pip", action="store_true", help="do not upgrade the venv's pip (offline)")
    parser.add_argument("--check", action="append", default=[], metavar="NAME=SCRIPT [ARGS]",
                        help="also run a script of the checkout with the venv's python (repeatable)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment for the smoke and the checks (diagnosis only)")
    parser.add_argument("--report", type=pathlib.Path,
                        help="write the report as JSON (default wheels/reports/install/<stack>.json)")
    parser.add_argument("--log", type=pathlib.Path, help="every command's output (default beside the report)")
    parser.add_argument("--print-command", action="store_true",
                        help=f"print the install command users run (for --index-url, default {README_INDEX}) "
                             "and exit")


def readme_command(stack: str, index_url: str = README_INDEX) -> str:
    """The README's command: pip, our index, the published lock, the pins read back."""
    lock = index_url.rstrip("/").removesuffix("/simple") + f"/{locks.LOCKS_DIR}/{stack}.txt"
    cmd = install.install_command(["pip"], index_url=index_url, lock=lock, pins=[])
    return shlex.join(cmd) + f" $(python -m fp4graph pins {stack})"


def pair(text: str, what: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{what} {text!r}: expected NAME=VALUE")
    return key, value


def extra_checks(values: list[str]) -> list[install.ExtraCheck]:
    out = []
    for text in values:
        name, command = pair(text, "--check")
        out.append(install.ExtraCheck(name=name, argv=tuple(shlex.split(command))))
    return out


def run(args: argparse.Namespace) -> int:
    settings = config.Settings.from_env(config.find_checkout())
    if args.print_command:
        print(readme_command(args.stack, args.index_url or README_INDEX))
        return 0
    report_path = args.report or settings.wheels_dir / "reports" / "install" / f"{args.stack}.json"
    log_file = args.log or report_path.with_suffix(".log")
    with tempfile.TemporaryDirectory(prefix=f"fp4graph-install-{args.stack}-") as tmp:
        options = install.options_for(
            settings, args.stack, venv=args.venv or pathlib.Path(tmp) / "venv", base_python=args.python,
            locked=not args.no_lock, lock_file=args.lock,
            index_url=args.index_url, extra_index_urls=args.extra_index_url, installer=args.installer,
            extra_checks=extra_checks(args.check), env=[pair(e, "--env") for e in args.env], log_file=log_file,
            upgrade_pip=not args.keep_pip,
        )
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.unlink(missing_ok=True)
        print(f"install {args.stack}: venv {options.venv}, log {log_file}", flush=True)
        report = install.install_stack(options)
        if args.venv is not None and not args.keep:
            shutil.rmtree(options.venv, ignore_errors=True)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(report_path, json.dumps(report.to_json(), indent=2) + "\n")
    print("\n".join(install.summary(report)))
    print(f"report: {report_path}")
    return 0 if report.ok else 1
