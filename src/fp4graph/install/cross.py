"""Install a stack for another platform (linux aarch64: DGX Spark) and smoke it there.

:func:`install_for_platform` resolves and installs the stack's full closure for the
target with uv (``--python-platform``, ``--python-version``, ``--target``: the host's uv
picks the target's wheels and never runs the target's code; a wheel-less package fails,
``--no-build``), the lock as constraints and the platform's overrides
(patches/locks/platforms.toml) with ``--override``; then, with the target's interpreter
(``interpreter``: the emulated aarch64 python3.11 of :mod:`fp4graph.platforms.emulator`
on an x86_64 host, the native one on a Spark) and the install on its PYTHONPATH:
``pip check``, the lock check, the import smoke and the ``--check`` scripts (the
whole-model simulation on a simulated GB10: ``--check "simulation=tests/harness/models/
simulate_installed.py --family llama --gpu sm121"``).

The smoke's checks run one after another in ONE interpreter (:data:`_BATCH`): under
emulation ``import torch`` alone takes ~50 s, and a process per check would pay it six
times.  Each check is still timed and reported on its own.

torch: where the platform's CUDA build lives on PyTorch's own index (torch 2.9.1 for
aarch64) and that index is not reachable (``torch_index=False``, these machines), the
install takes PyPI's build, a CPU one, and the report says so.  The same for the other
builds from their own index (``[[build]]``: sgl-kernel's cu130 build on sglang's index):
PyPI's build stands in, and a check that fails only for the CUDA 12 library PyPI's build
needs is reported skipped, with the library named (:func:`stand_in_failure`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Sequence

from packaging.utils import canonicalize_name

from ..model.locks import LOCKS_DIR
from ..model.log import log
from ..platforms.overrides import PlatformPins, platform_pins
from ..platforms.targets import INTERPRETER_ENV, Platform
from ..wheels.build import overrides_file, pins_file
from .stack import (
    InstallOptions,
    InstallReport,
    InstallSources,
    SmokeCheck,
    Step,
    _index,
    _run,
    _step,
    clean_env,
    directory_size,
    error_line,
    excludes_file,
    install_command,
    left_out_step,
    lock_problems,
    needs_driver,
    probe,
)

TORCH_CHECK = SmokeCheck(
    name="import torch",
    code="import platform, torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, "
         "'on', platform.machine())")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CrossOptions:
    base: InstallOptions  # its venv is the --target directory
    platform: Platform
    python_version: str  # the target interpreter's: 3.11
    uv: tuple[str, ...]  # the host's uv
    interpreter: tuple[str, ...]  # argv prefix of the target's python
    extra: PlatformPins
    torch_index: bool  # whether the indexes of the platform's builds (torch's CUDA build) are reachable

    @property
    def target(self) -> pathlib.Path:
        return self.base.venv


def options_for(base: InstallOptions, platform: Platform, *, uv: Sequence[str], interpreter: Sequence[str],
                python_version: str, torch_index: bool) -> CrossOptions:
    return CrossOptions(base=base, platform=platform, python_version=python_version, uv=tuple(uv),
                        interpreter=tuple(interpreter), torch_index=torch_index,
                        extra=platform_pins(base.repo / "patches" / LOCKS_DIR, base.stack, platform))


# What a CUDA build of torch requires that PyPI's aarch64 CPU build does not, and sglang
# imports at start (sglang requires none of them itself): taken at the version the lock
# pins for linux x86_64, whose torch on PyPI is a CUDA build.
CUDA_TORCH_BRINGS = ("triton",)


def stand_ins(options: CrossOptions) -> list[str]:
    """Where PyPI's CPU torch stands in for the platform's CUDA build (its index out of
    reach), what that build would bring: ``triton==V`` at the lock's x86_64 version."""
    if options.extra.torch is None or options.torch_index or options.base.lock is None:
        return []
    x86 = options.base.lock.versions({"platform_machine": "x86_64", "sys_platform": "linux",
                                      "platform_system": "Linux"})
    return [f"{name}=={x86[name]}" for name in CUDA_TORCH_BRINGS if name in x86]


def torch_note(options: CrossOptions) -> str:
    """What the torch (and the other builds from their own index) of this install is, when it
    is not the build a user's gets."""
    build = options.extra.torch
    if options.torch_index or not options.extra.indexed:
        return ""
    extra = stand_ins(options)
    others = "".join(f"; {b.name}: PyPI's build, not {b.requirement} from {b.index} (out of reach too)"
                     for b in options.extra.builds)
    if build is None:
        return others.removeprefix("; ")
    return (f"torch: PyPI's build (a CPU build on {options.platform.name}), not {build.requirement} "
            f"from {build.index}, which this machine cannot reach; a DGX Spark installs that one"
            + (f"; added what the CUDA build brings and sglang imports: {', '.join(extra)} (the lock's "
               "x86_64 pin)" if extra else "") + others)


_MISSING_CUDA12 = re.compile(r"(lib[\w+-]+\.so\.12): cannot open shared object file")


def stand_in_failure(options: CrossOptions, output: str) -> str:
    """Why a check failed, when only because PyPI's build stands in for a ``[[build]]`` whose
    index is out of reach: the CUDA 12 library it needs (``libnvrtc.so.12``), which the
    platform's build does not; "" otherwise."""
    missing = _MISSING_CUDA12.search(output)
    if options.torch_index or not options.extra.builds or missing is None:
        return ""
    builds = ", ".join(f"{b.requirement} ({b.index})" for b in options.extra.builds)
    return (f"PyPI's CUDA 12 build stands in for {builds}, out of reach here, and needs {missing[1]}, "
            f"which no package of this install loads (a DGX Spark installs the CUDA 13 build)")


def target_command(options: CrossOptions, where: InstallSources, overrides: pathlib.Path | None,
                   excludes: str | None = None) -> list[str]:
    """The README's DGX Spark command (published pins and overrides files, with uv) for
    the target platform into ``--target``, ours first, PyPI the default.  Where torch's
    index is out of reach, the stack's own pins file (PyPI's torch) stands in for the
    platform's."""
    builds = options.extra.indexed if options.torch_index else ()
    name = options.platform.name
    published_overrides = where.published(options.base, overrides_file(options.base.stack, name))
    pins_url = (where.published(options.base, pins_file(options.base.stack, name if builds or not
                                                        options.extra.indexed else None))
                if where.lock and options.base.pins_as_built else None)
    platform_options = ["--python-platform", options.platform.uv_platform, "--python-version",
                        options.python_version, "--target", str(options.target), "--no-build"]
    extra = list(options.base.extra_index_urls)
    if builds:  # their indexes beside ours; each carries exact versions only we pin
        for index in dict.fromkeys(b.index for b in builds):
            platform_options += ["--index", index]
        platform_options += ["--index-strategy", "unsafe-best-match"]
    pins = [*([] if pins_url else [*options.base.pins, *(b.requirement for b in builds)]),
            *stand_ins(options)]
    override = published_overrides or (str(overrides) if overrides else None)
    return install_command([*options.uv, "pip"], index_url=where.index_url, extra_index_urls=extra,
                           lock=where.lock, pins=pins, requirements=pins_url, uv=True, overrides=override,
                           options=platform_options, excludes=excludes)


# Run by the target's interpreter: each check of argv[1] (JSON) in turn, one JSON line each.
_BATCH = """\
import contextlib, io, json, runpy, sys, time, traceback
for check in json.loads(sys.argv[1]):
    started, out, ok = time.monotonic(), io.StringIO(), True
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            if check["module"]:
                sys.argv = [check["module"], *check["args"]]
                try:
                    runpy.run_module(check["module"], run_name="__main__", alter_sys=True)
                except SystemExit as exc:
                    if exc.code not in (0, None):
                        raise
            else:
                exec(compile(check["code"], check["name"], "exec"), {"__name__": "__main__"})
    except BaseException as exc:
        ok = False
        out.write("".join(traceback.format_exception(exc)))
    print("FP4GRAPH-CHECK " + json.dumps({"name": check["name"], "ok": ok, "seconds": time.monotonic() - started,
                                         "output": out.getvalue()[-20000:]}), flush=True)
"""


def _smoke(report: InstallReport, options: CrossOptions, env: dict[str, str], cwd: pathlib.Path) -> None:
    checks = [TORCH_CHECK, *options.base.checks]
    payload = json.dumps([{"name": c.name, "code": c.code, "module": c.module, "args": list(c.args)}
                          for c in checks])
    argv = [*options.interpreter, "-c", _BATCH, payload]
    log(f"{report.stack}: smoke: {len(checks)} checks in one {options.platform.name} interpreter")
    code, output, seconds = _run(argv, log_file=options.base.log_file, env=env, cwd=cwd)
    done = [json.loads(line.split(" ", 1)[1]) for line in output.splitlines() if line.startswith("FP4GRAPH-CHECK ")]
    for result in done:
        text = result["output"]
        step = Step(name=f"smoke: {result['name']}", ok=result["ok"], seconds=result["seconds"],
                    command=f"{shlex.join(options.interpreter)} (one interpreter, check {result['name']!r})",
                    detail=(text.strip().splitlines() or ["imports"])[-1][:300] if result["ok"]
                    else error_line(text), tail="" if result["ok"] else "\n".join(text.splitlines()[-15:]))
        stand_in = "" if result["ok"] else stand_in_failure(options, text)
        if not result["ok"] and needs_driver(text):
            step.ok, step.skipped = True, True
            step.detail = f"needs the CUDA driver, runs on a GPU machine: {error_line(text)[:300]}"
        elif stand_in:
            step.ok, step.skipped = True, True
            step.detail = f"{stand_in}: {error_line(text)[:200]}"
        report.steps.append(step)
    if len(done) < len(checks) or code != 0:
        report.steps.append(Step(name="smoke", ok=False, seconds=seconds, command=shlex.join(argv[:-2]),
                                 detail=f"exit {code} after {len(done)} of {len(checks)} checks: "
                                        f"{error_line(output)}", tail="\n".join(output.splitlines()[-15:])))


def target_path(target: pathlib.Path) -> str:
    """The PYTHONPATH of an install ``--target``: the directory and, as ``site.addsitedir``
    would add for a venv's site-packages, each directory its ``.pth`` files name
    (nvidia-cutlass-dsl 4.5's ``cutlass`` lives in ``nvidia_cutlass_dsl/python_packages``, which
    only its .pth adds: PYTHONPATH entries have their .pth files ignored). ``import`` lines
    are not run."""
    entries = [str(target)]
    for pth in sorted(target.glob("*.pth")):
        for line in pth.read_text(errors="replace").splitlines():
            line = line.strip()
            if not line or line.startswith(("#", "import ", "import\t")):
                continue
            path = (target / line).resolve()
            if path.is_dir() and str(path) not in entries:
                entries.append(str(path))
    return os.pathsep.join(entries)


def _pip_check(report: InstallReport, options: CrossOptions, env: dict[str, str], tools: pathlib.Path) -> None:
    """pip check by the target's interpreter (its markers), pip itself from ``tools``."""
    fetch = [*options.uv, "pip", "install", "--quiet", "--python-platform", options.platform.uv_platform,
             "--python-version", options.python_version, "--target", str(tools), "pip"]
    if not _step(report, "pip for pip check", fetch, options.base, detail_ok=str(tools)).ok:
        return
    argv = [*options.interpreter, "-m", "pip", "check"]
    code, output, seconds = _run(argv, log_file=options.base.log_file,
                                 env={**env, "PYTHONPATH": f"{target_path(options.target)}{os.pathsep}{tools}"})
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    sbsa = [ln for ln in lines if _sbsa_tagged(options.target, ln)]
    overridden = [ln for ln in lines if ln not in sbsa and _overridden(options, ln)]
    ok = code == 0 or (bool(lines) and len(sbsa) + len(overridden) == len(lines))
    known = ([f"NVIDIA's WHEEL tag manylinux2014_sbsa (the file is tagged aarch64; pip check says the "
              f"same on a Spark): {'; '.join(sbsa)}"] if sbsa else []) + (
             [f"the platform's overrides (patches/locks/platforms.toml): {'; '.join(overridden)}"]
             if overridden else [])
    detail = ("no broken requirements" if code == 0 else
              "ok but for " + " and ".join(known) if ok else f"exit {code}: {'; '.join(lines)[:500]}")
    report.steps.append(Step(name="pip check", ok=ok, seconds=seconds, command=shlex.join(argv), detail=detail,
                             tail="" if ok else "\n".join(lines[-15:])))


def _overridden(options: CrossOptions, line: str) -> bool:
    """Whether ``line`` is pip check's "X has requirement NAME==V, but you have NAME W" for an
    override of the platform (W its version): the requirement uv --override replaced."""
    for override in options.extra.overrides:
        have = line.rpartition(", but you have ")[2].rstrip(".").split()
        if len(have) == 2 and canonicalize_name(have[0]) == override.name and have[1] == override.version:
            return True
    return False


def _sbsa_tagged(target: pathlib.Path, line: str) -> bool:
    """Whether ``line`` is pip check's "NAME VERSION is not supported on this platform" for a
    wheel whose WHEEL file names NVIDIA's ``sbsa`` platform instead of ``aarch64``."""
    words = line.split()
    if not line.endswith("is not supported on this platform") or len(words) < 2:
        return False
    stem = f"{words[0].replace('-', '_')}-{words[1]}.dist-info"
    wheel = next((d / "WHEEL" for d in target.glob("*.dist-info") if d.name.lower() == stem.lower()), None)
    return wheel is not None and any(ln.startswith("Tag:") and ln.rstrip().endswith("_sbsa")
                                     for ln in wheel.read_text().splitlines())


def _extra_checks(report: InstallReport, options: CrossOptions, env: dict[str, str]) -> None:
    """Each ``--check`` script of the checkout by the target's interpreter, the install and
    ``src/`` on its path (the whole-model simulation: tests/harness/models/simulate_installed.py)."""
    base = options.base
    extra_env = {**env, "PYTHONPATH": f"{target_path(options.target)}{os.pathsep}{base.repo / 'src'}",
                 INTERPRETER_ENV: shlex.join(options.interpreter)}
    for extra in base.extra_checks:
        _step(report, extra.name, [*options.interpreter, *extra.argv], base, env=extra_env, cwd=base.repo,
              detail_ok=f"passed under the {options.platform.name} interpreter")


def install_for_platform(options: CrossOptions) -> InstallReport:
    """Install, disk, pip check, lock, the smoke, the extra checks; every step reports
    (module docstring)."""
    if options.target.exists():
        shutil.rmtree(options.target)
    base = options.base
    report = InstallReport(stack=base.stack, venv=str(options.target), command="")
    with tempfile.TemporaryDirectory(prefix="fp4graph-cross-") as scratch:
        overrides = None
        if options.extra.overrides:
            overrides = pathlib.Path(scratch) / "overrides.txt"
            overrides.write_text("".join(o.requirement + "\n" for o in options.extra.overrides))
        with _index(base) as where, excludes_file(base.leave_out) as excludes:
            lock_url = where.lock
            command = target_command(options, where, overrides, excludes)
            report.command = shlex.join(command)
            step = _step(report, "install", command, base,
                         detail_ok=f"uv for {options.platform.name}, {'locked' if lock_url else 'unlocked'}")
        if not step.ok:
            return report
        report.disk_bytes = directory_size(options.target)
        report.steps.append(Step(name="disk", ok=True, seconds=0, detail=f"{report.disk_bytes / 1e9:.2f} GB"))
        env = {**clean_env(), **dict(base.env), "PYTHONPATH": target_path(options.target)}
        _pip_check(report, options, env, pathlib.Path(scratch) / "tools")
        started = time.monotonic()
        try:
            installed, environment = probe(list(options.interpreter), env)
        except Exception as exc:  # an InstallError, or an interpreter that does not start
            report.steps.append(Step(name="lock", ok=False, seconds=time.monotonic() - started, detail=str(exc)))
            return report
        keep = ("torch", "transformers", "flashinfer-python", "flashinfer-cubin", "sglang", "sgl-kernel",
                "sglang-kernel", "torch-memory-saver", "triton", "numpy")
        report.versions = {k: installed[k] for k in keep if k in installed}
        if base.lock is not None:
            problems = lock_problems(base.lock, installed, [*base.pins, *stand_ins(options)], environment)
            report.steps.append(Step(name="lock", ok=not problems, seconds=time.monotonic() - started,
                                     detail="; ".join(problems) or f"{len(installed)} distributions as "
                                     f"locked for {environment['platform_machine']}"))
        if base.leave_out:
            report.steps.append(left_out_step(base, environment))
        note = torch_note(options)
        if note:
            report.steps.append(Step(name="torch build", ok=True, seconds=0, detail=note))
        _smoke(report, options, env, pathlib.Path(scratch))
    _extra_checks(report, options, env)
    return report
