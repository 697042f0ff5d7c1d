"""``python -m fp4graph deps``: the dependency drift report (what PyPI would change in each lock)."""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile

from ..install import deps, lock
from ..install import stack as install
from ..model import config, stacks
from . import common

NAME = "deps"
HELP = "each stack's lock against what resolves today; --heavy also installs unlocked and runs the smoke"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stack", nargs="*", help="stacks, or served releases (sglang-0.5.16); a flashinfer-only "
                                                 "stack stands for the releases it serves (default: every lock)")
    parser.add_argument("--heavy", action="store_true",
                        help="also install each stack without its lock (GBs, minutes) and run the import smoke")
    parser.add_argument("--installer", choices=install.INSTALLERS, default="pip",
                        help="what installs the stacks in the heavy mode")
    parser.add_argument("--uv", help="the uv executable (default: python -m uv)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter the venvs are made from")
    parser.add_argument("--out", type=pathlib.Path, help="report directory (default wheels/reports)")


def run(args: argparse.Namespace) -> int:
    settings = config.Settings.from_env(config.find_checkout())
    out = args.out or settings.wheels_dir / "reports"
    with tempfile.TemporaryDirectory(prefix="fp4graph-deps-") as tmp:
        unlocked = None
        if args.heavy:
            def unlocked(name: str) -> install.InstallOptions:
                return install.options_for(
                    settings, name, venv=pathlib.Path(tmp) / name, base_python=args.python,
                    locked=False, installer=args.installer,
                    log_file=out / "deps-drift" / f"{name}.log")
        options = deps.DepsOptions(resolver=lock.LockOptions(uv=common.uv_command(args.uv)), unlocked_install=unlocked)
        names = lock.lock_names(stacks.load(settings.stacks_file), args.stack) if args.stack else None
        results = deps.drift(settings, names or common.locked_names(settings), options)
    md, js = deps.write_reports(out, results)
    print(deps.markdown(results))
    print(f"wrote {md}, {js}")
    return 0
