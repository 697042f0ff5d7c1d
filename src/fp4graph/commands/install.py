"""``python -m fp4graph install``: install a stack as the README says, then check it imports."""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import shlex
import shutil
import sys
import tempfile

from ..install import cross
from ..install import stack as install
from ..model import config, locks, stacks
from ..model.errors import ConfigError
from ..model.files import write_atomic
from ..platforms import emulator
from ..platforms.targets import PLATFORMS, Platform, host_platform, platform_named
from ..wheels.build import overrides_file, pins_file

NAME = "install"
HELP = "install a stack from the built index + PyPI with its lock; pip check; import smoke"

# The README's install command shows this index (`--print-command` with it).
README_INDEX = "https://pypi.internal/simple/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stack", help="a built stack with sglang, e.g. sglang-0.5.9, or an sglang release a "
                                      "flashinfer-only stack serves, e.g. sglang-0.5.16 (PyPI's sglang beside "
                                      "our flashinfer, its lock patches/locks/sglang-0.5.16.txt)")
    parser.add_argument("--index-url", help="an index serving our wheels and PyPI's (default: wheels/ "
                                            "served on 127.0.0.1, PyPI as the extra index)")
    parser.add_argument("--extra-index-url", action="append",
                        help=f"indexes for everything else (default {install.PYPI} with the served wheels/, "
                             "none with --index-url)")
    parser.add_argument("--no-lock", action="store_true",
                        help="install without the stack's lock (what PyPI's newest versions do)")
    parser.add_argument("--lock", type=pathlib.Path, help="the lock (default patches/locks/<stack>.txt)")
    parser.add_argument("--leave-out", action="append", default=[], metavar="NAME",
                        help="install the closure without NAME (uv --excludes; repeatable): what cannot install "
                             "here, e.g. cuda-tile for sglang 0.5.18+ (a stub sdist fetching from NVIDIA's "
                             "index); the report fails, naming it")
    parser.add_argument("--installer", choices=install.INSTALLERS, default="pip")
    parser.add_argument("--venv", type=pathlib.Path,
                        help="where to make the venv (default a temporary one, removed afterwards)")
    parser.add_argument("--keep", action="store_true", help="keep the --venv")
    parser.add_argument("--python", default=sys.executable, help="the interpreter the venv is made from")
    parser.add_argument("--keep-pip", action="store_true", help="do not upgrade the venv's pip (offline)")
    parser.add_argument("--check", action="append", default=[], metavar="NAME=SCRIPT [ARGS]",
                        help="also run a script of the checkout with the venv's python (repeatable; with "
                             "--platform the target's interpreter, the install on its PYTHONPATH)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment for the smoke and the checks (diagnosis only)")
    parser.add_argument("--report", type=pathlib.Path,
                        help="write the report as JSON (default wheels/reports/install/<stack>.json)")
    parser.add_argument("--log", type=pathlib.Path, help="every command's output (default beside the report)")
    parser.add_argument("--platform", choices=sorted(PLATFORMS),
                        help="install for this platform with uv (--python-platform, --target) and smoke it "
                             "with its interpreter: linux-aarch64 (DGX Spark) on an x86_64 machine runs "
                             "the emulated aarch64 python3.11 (fp4graph.platforms.emulator)")
    parser.add_argument("--print-command", action="store_true",
                        help=f"print the install command users run (for --index-url, default {README_INDEX}) "
                             "and exit")


def readme_command(stack: str, index_url: str = README_INDEX, platform: str | None = None) -> str:
    """The README's command: our index, the published lock and pins files (no checkout
    needed); pip for linux x86_64, uv for ``platform`` linux-aarch64 (a DGX Spark: its
    overrides file needs uv's --override). ``nox -s install`` runs the same command
    (:func:`fp4graph.install.stack.install_command`) against wheels/ served here."""
    base = index_url.rstrip("/").removesuffix("/simple") + "/"
    lock = base + f"{locks.LOCKS_DIR}/{stack}.txt"
    if platform is None:
        cmd = install.install_command(["pip"], index_url=index_url, lock=lock, requirements=base + pins_file(stack))
    else:
        cmd = install.install_command(["uv", "pip"], index_url=index_url, lock=lock,
                                      requirements=base + pins_file(stack, platform),
                                      overrides=base + overrides_file(stack, platform))
    return shlex.join(cmd)


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


def _cross_options(settings: config.Settings, options: install.InstallOptions,
                   target: Platform) -> cross.CrossOptions:
    """The target's interpreter: this one on its own platform, else the emulated one (aarch64
    only); the CUDA torch index is taken where the target runs natively."""
    native = target == host_platform()
    if not native and target.machine != "aarch64":
        raise ConfigError(f"--platform {target.name}: no emulated interpreter for it on {host_platform().name}")
    interpreter = [options.base_python] if native else emulator.aarch64_python(settings.cache_dir)
    uv = [sys.executable, "-m", "uv"] if importlib.util.find_spec("uv") else [shutil.which("uv") or "uv"]
    return cross.options_for(options, target, uv=uv, interpreter=interpreter,
                             python_version=emulator.PYTHON_VERSION if not native else
                             ".".join(map(str, sys.version_info[:2])), torch_index=native)


def run(args: argparse.Namespace) -> int:
    settings = config.Settings.from_env(config.find_checkout())
    stacks.load(settings.stacks_file).refuse_unserved(args.stack)
    if args.print_command:
        print(readme_command(args.stack, args.index_url or README_INDEX, args.platform))
        return 0
    suffix = f".{args.platform}" if args.platform else ""
    report_path = args.report or settings.wheels_dir / "reports" / "install" / f"{args.stack}{suffix}.json"
    log_file = args.log or report_path.with_suffix(".log")
    with tempfile.TemporaryDirectory(prefix=f"fp4graph-install-{args.stack}-") as tmp:
        options = install.options_for(
            settings, args.stack, venv=args.venv or pathlib.Path(tmp) / "venv", base_python=args.python,
            locked=not args.no_lock, lock_file=args.lock,
            index_url=args.index_url, extra_index_urls=args.extra_index_url, installer=args.installer,
            extra_checks=extra_checks(args.check), env=[pair(e, "--env") for e in args.env], log_file=log_file,
            upgrade_pip=not args.keep_pip, leave_out=args.leave_out,
        )
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.unlink(missing_ok=True)
        print(f"install {args.stack}: venv {options.venv}, log {log_file}", flush=True)
        if args.platform:
            report = cross.install_for_platform(_cross_options(settings, options, platform_named(args.platform)))
        else:
            report = install.install_stack(options)
        if args.venv is not None and not args.keep:
            shutil.rmtree(options.venv, ignore_errors=True)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(report_path, json.dumps(report.to_json(), indent=2) + "\n")
    print("\n".join(install.summary(report)))
    print(f"report: {report_path}")
    return 0 if report.ok else 1
