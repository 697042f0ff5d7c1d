"""Install a stack as the README tells users to, and check what the server imports.

Steps (each recorded with its time and, when it fails, the last lines of its output):

1. ``venv``: a fresh venv from the base interpreter, its pip upgraded;
2. ``install``: :func:`install_command`, the README's command: our index (``wheels/``
   served on 127.0.0.1 when no ``index_url`` is given) plus PyPI for the rest, the stack's
   lock as constraints (``-c``), the exact ``+fp4graph`` pins, the full dependency closure;
3. ``disk``: the venv's size;
4. ``pip check``;
5. ``lock``: every installed distribution the lock names has the locked version, and
   nothing is installed that the lock does not name (our own pins aside);
6. ``smoke``: each of :func:`smoke_checks` in its own interpreter of the venv: what
   sglang's server imports at start (FlashInfer, ``fp4_warmup``, the ModelOpt fp4 method,
   each family's model class, ``launch_server --help``);
7. extra checks the caller names (the whole-model simulation on the installed packages:
   ``tests/harness/models/simulate_installed.py``), run by the venv's interpreter from the checkout.

Nothing stops at the first failure after the install: every step reports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence

from ..model import families, series
from ..model.config import Settings
from ..model.errors import Fp4graphError
from ..model.locks import Lock, lock_path, read
from ..model.log import log
from ..platforms.targets import INTERPRETER_ENV
from ..wheels.build import built_pins, pins_file
from .serve import served

PYPI = "https://pypi.org/simple/"
INSTALLERS = ("pip", "uv")
TAIL_LINES = 15


class InstallError(Fp4graphError):
    """A stack could not be set up to be installed (no wheels, no lock)."""


def install_command(
    installer: Sequence[str],
    *,
    index_url: str,
    extra_index_urls: Sequence[str] = (),
    lock: str | None,
    pins: Sequence[str] = (),
    requirements: str | None = None,
    uv: bool = False,
    overrides: str | None = None,
    options: Sequence[str] = (),
    excludes: str | None = None,
) -> list[str]:
    """The one install command: README's, ``nox -s install``'s and ``nox -s integration``'s.

    ``installer`` is what runs pip (``["pip"]``, ``[python, "-m", "pip"]``) or, with ``uv``,
    ``uv pip`` with its ``--python``.  pip consults every index and takes the highest
    version (our exact ``==X+fp4graph.N`` pins exist only on ours); uv's default
    first-index strategy takes a name from the first index that has it, so ours goes first
    as ``--index``, PyPI is the ``--default-index``, and ``unsafe-first-match`` lets a name
    ours serves in other versions come from PyPI where its pin is pristine (sglang-0.5.12.post1's
    ``flashinfer-python==0.6.11.post1``; first-index stops there): no public index can hold
    our ``+fp4graph.N`` pins, the lock pins the rest.  ``requirements``: the published file
    of the stack's pins (``-r``; no checkout needed), else ``pins``.  ``overrides`` (uv only): a file of
    requirements replacing the stack's own exact pins of those names (a platform's,
    patches/locks/platforms.toml); ``options`` follow ``install`` (uv's --python-platform);
    ``excludes`` (uv only): a file of package names left out of the resolution."""
    cmd = [*installer, "install", *options]
    if uv:
        cmd += ["--index", index_url, *(a for u in extra_index_urls for a in ("--default-index", u))]
        if extra_index_urls and "--index-strategy" not in options:
            cmd += ["--index-strategy", "unsafe-first-match"]
    else:
        cmd += ["--index-url", index_url, *(a for u in extra_index_urls for a in ("--extra-index-url", u))]
    if lock:
        cmd += ["-c", lock]
    if overrides:
        cmd += ["--override", overrides]
    if excludes:
        cmd += ["--excludes", excludes]
    return [*cmd, *(["-r", requirements] if requirements else []), *pins]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SmokeCheck:
    """One import of the smoke: ``code`` run by the venv's interpreter (``-c``), or its
    ``module`` run with ``args`` (``-m``)."""

    name: str
    code: str | None = None
    module: str | None = None
    args: tuple[str, ...] = ()

    def argv(self, python: pathlib.Path | Sequence[str]) -> list[str]:
        """The check run by ``python`` (a path, or an argv prefix: an emulated interpreter)."""
        prefix = [str(python)] if isinstance(python, pathlib.Path) else list(python)
        if self.module:
            return [*prefix, "-m", self.module, *self.args]
        return [*prefix, "-c", self.code or ""]


_MODEL_CLASSES = """\
import importlib, json, pathlib, re
import sglang.srt.models
from sglang.srt.models.registry import ModelRegistry
wanted = json.loads({wanted!r})
have = set(ModelRegistry.get_supported_archs())
missing = [a for a in wanted if a not in have]
errors = {{}}  # each missing class's module, imported again: why the registry left it out
models = pathlib.Path(list(sglang.srt.models.__path__)[0])
for arch in missing:
    defines = [f.stem for f in sorted(models.glob("*.py")) if re.search(rf"^class {{arch}}\\b", f.read_text(), re.M)]
    for name in defines[:1] or ["?"]:
        try:
            importlib.import_module(f"sglang.srt.models.{{name}}")
            errors[arch] = f"models/{{name}}.py imports, yet the registry lacks it"
        except Exception as exc:
            errors[arch] = f"models/{{name}}.py: {{type(exc).__name__}}: {{' '.join(str(exc).split())[-300:]}}"
for arch in wanted:
    if arch in have:
        cls, _ = ModelRegistry.resolve_model_cls([arch])
        print(arch, "->", cls.__module__ + "." + cls.__qualname__)
if missing:
    for arch in missing:
        print(arch, "MISSING:", errors[arch])
    driver = all("libcuda.so.1: cannot open shared object file" in e for e in errors.values())
    raise SystemExit("ImportError: sglang's ModelRegistry lacks " + ", ".join(missing) + (
        " (their modules import sgl_kernel, whose library needs the CUDA driver: "
        "libcuda.so.1: cannot open shared object file)" if driver else ": " + "; ".join(errors.values())))
"""


_IMPORT_FLASHINFER = """\
import sys
import flashinfer
print('flashinfer', flashinfer.__version__, flashinfer.__file__)
if 'torch._dynamo' in sys.modules:
    raise AssertionError('import flashinfer imported torch._dynamo (seconds in every process)')
if {version!r} and flashinfer.__version__ != {version!r}:
    raise AssertionError(f'flashinfer {{flashinfer.__version__}} imports, not the pinned {version}')
"""


def smoke_checks(architectures: Sequence[str], *, fp4_warmup: bool = True, flashinfer: str = "") -> list[SmokeCheck]:
    """What sglang's server imports at start, as separate checks; ``fp4_warmup``: the
    stack's flashinfer is ours with the ``fp4-warmup`` topic (pristine, or 0.6.11.post1's
    CUDA-version-only series, has no ``fp4_warmup``). ``import flashinfer`` leaves
    ``torch._dynamo`` unloaded and, with ``flashinfer`` (the pinned version), imports that
    one (ours, not a flashinfer-python of PyPI)."""
    warmup = [SmokeCheck(name="flashinfer.fp4_warmup",
                         code="from flashinfer import fp4_warmup; assert callable(fp4_warmup); print(fp4_warmup)")]
    return [
        SmokeCheck(name="import flashinfer", code=_IMPORT_FLASHINFER.format(version=flashinfer)),
        *(warmup if fp4_warmup else []),
        SmokeCheck(name="import sgl_kernel", code="import sgl_kernel; print('sgl_kernel', sgl_kernel.__file__)"),
        SmokeCheck(name="ModelOpt fp4 method",
                   code="from sglang.srt.layers.quantization.modelopt_quant import "
                        "ModelOptFp4Config, ModelOptFp4LinearMethod; print(ModelOptFp4LinearMethod)"),
        SmokeCheck(name="model classes", code=_MODEL_CLASSES.format(wanted=json.dumps(list(architectures)))),
        SmokeCheck(name="launch_server --help", module="sglang.launch_server", args=("--help",)),
    ]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ExtraCheck:
    """A script of the checkout run by the venv's interpreter (``src/`` on its path)."""

    name: str
    argv: tuple[str, ...]  # the script and its arguments, relative to the checkout


@dataclasses.dataclass(frozen=True, kw_only=True)
class InstallOptions:
    stack: str
    pins: tuple[str, ...]
    repo: pathlib.Path
    wheels_dir: pathlib.Path
    venv: pathlib.Path
    base_python: str
    lock: Lock | None  # None: install unlocked (the heavy drift report)
    lock_file: pathlib.Path | None
    index_url: str | None = None  # None: serve wheels_dir on 127.0.0.1
    extra_index_urls: tuple[str, ...] = (PYPI,)
    installer: str = "pip"
    checks: tuple[SmokeCheck, ...] = ()
    extra_checks: tuple[ExtraCheck, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # for the smoke and extra checks
    log_file: pathlib.Path | None = None
    upgrade_pip: bool = True  # False: the pip the venv brings (offline tests)
    pins_as_built: bool = True  # the pins are wheels/manifest.json's (its published pins file says them)
    # Packages of the closure not installed (uv --excludes): what cannot install here (sglang
    # 0.5.18+'s cuda-tile==1.6.0rc5, a stub sdist fetching from NVIDIA's index); a step says so.
    leave_out: tuple[str, ...] = ()

    @property
    def python(self) -> pathlib.Path:
        return self.venv / "bin" / "python"


@dataclasses.dataclass(kw_only=True)
class Step:
    name: str
    ok: bool
    seconds: float
    detail: str = ""  # one line: what it found, or the error
    tail: str = ""  # the last lines of the output when it failed
    command: str = ""
    skipped: bool = False  # could not run here (no CUDA driver); not a failure

    def line(self) -> str:
        status = "skipped" if self.skipped else "ok" if self.ok else "FAILED"
        return f"{self.name}: {status} ({self.seconds:.0f} s){': ' + self.detail if self.detail else ''}"


@dataclasses.dataclass(kw_only=True)
class InstallReport:
    stack: str
    venv: str
    command: str
    steps: list[Step] = dataclasses.field(default_factory=list)
    disk_bytes: int | None = None
    versions: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(s.ok for s in self.steps)

    @property
    def failed(self) -> list[Step]:
        return [s for s in self.steps if not s.ok]

    def to_json(self) -> dict[str, object]:
        return {"stack": self.stack, "venv": self.venv, "command": self.command, "ok": self.ok,
                "disk_bytes": self.disk_bytes, "versions": self.versions,
                "steps": [dataclasses.asdict(s) for s in self.steps]}


_ERROR_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception|Exit)|error|ERROR)\b.*")


def error_line(output: str) -> str:
    """The line of ``output`` that says what went wrong (the last ``XError: ...``)."""
    lines = [ln.rstrip() for ln in output.splitlines() if ln.strip()]
    found = [ln.strip() for ln in lines if _ERROR_LINE.match(ln)]
    return (found or lines or ["(no output)"])[-1][:500]


def _tail(output: str, n: int = TAIL_LINES) -> str:
    return "\n".join(output.rstrip().splitlines()[-n:])


def clean_env() -> dict[str, str]:
    """This process's environment without what would put other packages into the venv's
    view (PYTHONPATH: the checkout's src/ would show up in pip check)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _run(argv: Sequence[str], *, log_file: pathlib.Path | None, env: dict[str, str] | None = None,
         cwd: pathlib.Path | None = None) -> tuple[int, str, float]:
    started = time.monotonic()
    result = subprocess.run(list(argv), capture_output=True, text=True, env=env or clean_env(), cwd=cwd)
    output = result.stdout + result.stderr
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with log_file.open("a", encoding="utf-8") as f:
            f.write(f"$ {shlex.join(argv)}\n{output}\n[exit {result.returncode}]\n")
    return result.returncode, output, time.monotonic() - started


# A CPU machine has no CUDA driver: a compiled CUDA library that links it cannot load here
# (sgl-kernel's common_ops), which says nothing about the install.
NO_DRIVER = "libcuda.so.1: cannot open shared object file"


def needs_driver(output: str) -> bool:
    """Whether the error that ended ``output`` is the missing CUDA driver (its message, from
    the error line on, names it), not some other error after a logged driver warning."""
    last = error_line(output)
    at = output.rfind(last)
    return NO_DRIVER in (output[at:] if at >= 0 else last)


def _step(report: InstallReport, name: str, argv: Sequence[str], options: InstallOptions, *,
          env: dict[str, str] | None = None, cwd: pathlib.Path | None = None, detail_ok: str = "",
          driver_skips: bool = False) -> Step:
    log(f"{report.stack}: {name}: $ {shlex.join(argv)}")
    code, output, seconds = _run(argv, log_file=options.log_file, env=env, cwd=cwd)
    step = Step(name=name, ok=code == 0, seconds=seconds, command=shlex.join(argv),
                detail=detail_ok if code == 0 else f"exit {code}: {error_line(output)}",
                tail="" if code == 0 else _tail(output))
    if code != 0 and driver_skips and needs_driver(output):
        step.ok, step.skipped = True, True
        step.detail = f"needs the CUDA driver ({NO_DRIVER}), runs on a GPU machine: {error_line(output)[:300]}"
    report.steps.append(step)
    return step


def directory_size(path: pathlib.Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (pathlib.Path(root) / name).lstat().st_size
    return total


# Run by the venv's interpreter (stdlib only): its distributions (canonical names, PEP 503)
# and its marker environment (as packaging.markers.default_environment computes it).
_PROBE = """\
import importlib.metadata as m, json, os, platform, re, sys
def version(info):
    v = f"{info.major}.{info.minor}.{info.micro}"
    return v + (info.releaselevel[0] + str(info.serial) if info.releaselevel != "final" else "")
print(json.dumps({
    "distributions": {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(): d.version for d in m.distributions()},
    "environment": {
        "implementation_name": sys.implementation.name,
        "implementation_version": version(sys.implementation.version),
        "os_name": os.name, "platform_machine": platform.machine(), "platform_release": platform.release(),
        "platform_system": platform.system(), "platform_version": platform.version(),
        "python_full_version": platform.python_version(), "platform_python_implementation":
        platform.python_implementation(), "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    },
}))
"""


def probe(python: pathlib.Path | Sequence[str],
          env: dict[str, str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """(distributions {canonical name: version}, marker environment) of ``python`` (a path,
    or an argv prefix with its ``env``)."""
    prefix = [str(python)] if isinstance(python, pathlib.Path) else list(python)
    out = subprocess.run([*prefix, "-c", _PROBE], capture_output=True, text=True, env=env or clean_env())
    if out.returncode != 0:
        raise InstallError(f"{python}: cannot list its distributions: {error_line(out.stderr)}")
    data = json.loads(out.stdout)
    return data["distributions"], data["environment"]


# Installed by the venv itself, not by the stack: never in a lock.
_VENV_OWN = frozenset({"pip", "setuptools", "wheel", "uv"})  # uv: --installer uv's, in the venv


def lock_problems(lock: Lock, installed: dict[str, str], own: Sequence[str],
                  environment: dict[str, str] | None) -> list[str]:
    """Where the venv differs from the lock: one of our own pins (``own``) not installed
    at its version, a locked package at another version, or a package installed that the
    lock does not name."""
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    locked = lock.versions(environment)
    own_pins = {canonicalize_name(name): version for name, _, version in (p.partition("==") for p in own)}
    own_keys = set(own_pins)
    problems = [f"{name} {installed.get(name, 'not')} installed, pinned {version}"
                for name, version in sorted(own_pins.items())
                if name not in installed or Version(installed[name]) != Version(version)]
    problems += [f"{name} {have} installed, locked {locked[name]}"
                 for name, have in sorted(installed.items()) if name in locked and locked[name] != have]
    problems += [f"{name} {have} installed, not in the lock"
                 for name, have in sorted(installed.items())
                 if name not in locked and name not in own_keys and name not in _VENV_OWN]
    return problems


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class InstallSources:
    """Where the install command finds the index, the lock and the published pins files."""

    index_url: str
    lock: str | None  # the lock's URL (or path)
    base: str | None  # the served wheels/ (its published locks/ and pins files), None: an index given

    def published(self, options: InstallOptions, path: str) -> str | None:
        """The URL of ``path`` (relative to wheels/) when wheels/ is served and has it."""
        return self.base + path if self.base and (options.wheels_dir / path).is_file() else None


@contextlib.contextmanager
def _index(options: InstallOptions) -> Iterator[InstallSources]:
    """The index, lock and published files for the install command."""
    if options.index_url:
        lock = str(options.lock_file) if options.lock_file else None
        yield InstallSources(index_url=options.index_url, lock=lock, base=None)
        return
    with served(options.wheels_dir) as base:
        lock = None
        if options.lock_file is not None:
            # The published lock (wheels/locks/) as users fetch it, else the checkout's.
            published = options.wheels_dir / "locks" / options.lock_file.name
            lock = base + f"locks/{options.lock_file.name}" if published.is_file() else str(options.lock_file)
        yield InstallSources(index_url=base + "simple/", lock=lock, base=base)


@contextlib.contextmanager
def excludes_file(leave_out: Sequence[str]) -> Iterator[str | None]:
    """uv's ``--excludes`` file of ``leave_out`` (None: nothing left out)."""
    if not leave_out:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="fp4graph-excludes-") as tmp:
        path = pathlib.Path(tmp) / "excludes.txt"
        path.write_text("".join(name + "\n" for name in leave_out))
        yield str(path)


def left_out_step(options: InstallOptions, environment: dict[str, str] | None) -> Step:
    """What the install lacks, at the lock's version: a failed step (the install is not the
    one users get), so the report is never ok with a package missing."""
    locked = options.lock.versions(environment) if options.lock else {}
    names = ", ".join(f"{n}=={locked[n]}" if n in locked else n for n in options.leave_out)
    return Step(name="left out", ok=False, seconds=0,
                detail=f"not installed (--leave-out): {names}; the rest of the closure is installed and checked")


def install_stack(options: InstallOptions) -> InstallReport:
    """Every step of the module docstring; the report says which failed and why."""
    if options.leave_out and options.installer != "uv":
        raise InstallError(f"--leave-out {' '.join(options.leave_out)} needs --installer uv (uv pip install "
                           "--excludes; pip has no such option)")
    if options.venv.exists():
        shutil.rmtree(options.venv)
    python = options.python
    report = InstallReport(stack=options.stack, venv=str(options.venv), command="")
    step = _step(report, "venv", [options.base_python, "-m", "venv", str(options.venv)], options)
    if not step.ok:
        return report
    tools = [*(["pip"] if options.upgrade_pip else []), *(["uv"] if options.installer == "uv" else [])]
    if tools:
        step = _step(report, "venv tools", [str(python), "-m", "pip", "install", "--upgrade", *tools], options,
                     detail_ok=" ".join(tools))
        if not step.ok:
            return report
    if options.installer == "uv":
        installer = [str(options.venv / "bin" / "uv"), "pip"]
    else:
        installer = [str(python), "-m", "pip"]

    with _index(options) as where, excludes_file(options.leave_out) as excludes:
        # The README's command: the published pins file when it is the stack's own pins.
        lock_url = where.lock
        pins_url = where.published(options, pins_file(options.stack)) if lock_url and options.pins_as_built else None
        command = install_command(installer, index_url=where.index_url, extra_index_urls=options.extra_index_urls,
                                  lock=lock_url, pins=() if pins_url else options.pins, requirements=pins_url,
                                  uv=options.installer == "uv", excludes=excludes)
        uv_env = {**clean_env(), "VIRTUAL_ENV": str(options.venv)} if options.installer == "uv" else None
        report.command = shlex.join(command)
        step = _step(report, "install", command, options, env=uv_env,
                     detail_ok=f"{options.installer}, {'locked' if lock_url else 'unlocked'}")
    if not step.ok:
        return report

    report.disk_bytes = directory_size(options.venv)
    report.steps.append(Step(name="disk", ok=True, seconds=0, detail=f"{report.disk_bytes / 1e9:.2f} GB"))
    _step(report, "pip check", [str(python), "-m", "pip", "check"], options, detail_ok="no broken requirements")

    try:
        installed, environment = probe(python)
    except InstallError as exc:
        report.steps.append(Step(name="lock", ok=False, seconds=0, detail=str(exc)))
        return report
    keep = ("torch", "transformers", "flashinfer-python", "flashinfer-cubin", "sglang", "sgl-kernel",
            "sglang-kernel", "kernels", "triton", "huggingface-hub", "numpy")
    report.versions = {k: installed[k] for k in keep if k in installed}
    if options.lock is not None:
        problems = lock_problems(options.lock, installed, options.pins, environment)
        report.steps.append(Step(name="lock", ok=not problems, seconds=0,
                                 detail="; ".join(problems) or f"{len(installed)} distributions as locked"))
    if options.leave_out:
        report.steps.append(left_out_step(options, environment))

    env = {**clean_env(), **dict(options.env)}
    with tempfile.TemporaryDirectory(prefix="fp4graph-smoke-") as cwd:
        for check in options.checks:
            _step(report, f"smoke: {check.name}", check.argv(python), options, env=env, cwd=pathlib.Path(cwd),
                  detail_ok="imports", driver_skips=True)
    extra_env = {**env, "PYTHONPATH": str(options.repo / "src"), INTERPRETER_ENV: shlex.quote(str(python))}
    for extra in options.extra_checks:
        _step(report, extra.name, [str(python), *extra.argv], options, env=extra_env, cwd=options.repo,
              detail_ok="passed")
    return report


def summary(report: InstallReport) -> list[str]:
    """The report as lines: one a step, then each failure's last lines."""
    lines = [f"$ {report.command}"] if report.command else []
    lines += [s.line() for s in report.steps]
    if any(s.skipped for s in report.steps):
        lines.append("skipped: needs what a CPU machine lacks; runs where it is (an SM120 machine)")
    if report.versions:
        lines.append("versions: " + " ".join(f"{k}=={v}" for k, v in report.versions.items()))
    for s in report.failed:
        if s.tail:
            lines.append(f"--- {s.name}: the last lines of its output")
            lines += ["    " + ln for ln in s.tail.splitlines()]
    verdict = "ok" if report.ok else "FAILED: " + ", ".join(s.name for s in report.failed)
    lines.append(f"install {report.stack}: {verdict}")
    return lines


def pinned_version(pins: Sequence[str], project: str) -> str:
    """The version ``pins`` pin ``project`` at ("" where none)."""
    return next((p.partition("==")[2] for p in pins if p.partition("==")[0] == project), "")


def sglang_version(pins: Sequence[str]) -> str:
    """The upstream sglang version of a stack's pins."""
    version = pinned_version(pins, "sglang")
    if version:
        return version.split("+", 1)[0]
    raise InstallError(f"pins {' '.join(pins)} hold no sglang: `install` is for stacks with sglang")


def flashinfer_has_warmup(patches_dir: pathlib.Path, pins: Sequence[str]) -> bool:
    """Whether a stack's pins hold our flashinfer-python (``+fp4graph.N``) and its series
    carries ``fp4-warmup`` (``flashinfer.fp4_warmup``)."""
    version, ours, _ = pinned_version(pins, "flashinfer-python").partition("+fp4graph.")
    found = series.load_series(patches_dir, "flashinfer-python", version) if ours else None
    return found is not None and "fp4-warmup" in found.topics


def options_for(
    settings: Settings,
    stack: str,
    *,
    venv: pathlib.Path,
    base_python: str,
    locked: bool = True,
    lock_file: pathlib.Path | None = None,
    index_url: str | None = None,
    extra_index_urls: Sequence[str] | None = None,
    installer: str = "pip",
    extra_checks: Sequence[ExtraCheck] = (),
    env: Sequence[tuple[str, str]] = (),
    log_file: pathlib.Path | None = None,
    upgrade_pip: bool = True,
    pins: Sequence[str] | None = None,
    wheels_dir: pathlib.Path | None = None,
    leave_out: Sequence[str] = (),
) -> InstallOptions:
    """The options of installing ``stack`` as built in ``wheels/`` (or ``wheels_dir``; its
    ``pins`` unless given), with its lock (``patches/locks/<stack>.txt`` unless
    ``lock_file``) unless not ``locked``; the smoke imports the model classes of the
    families its sglang release has."""
    wheels = wheels_dir or settings.wheels_dir
    as_built = pins is None
    pins = tuple(pins if pins is not None else built_pins(wheels, stack))
    path = (lock_file or lock_path(settings.patches_dir, stack)) if locked else None
    return InstallOptions(
        stack=stack, pins=pins, repo=settings.repo, wheels_dir=wheels, venv=venv,
        base_python=base_python, lock=read(path, stack) if path else None, lock_file=path,
        index_url=index_url,
        extra_index_urls=tuple(extra_index_urls if extra_index_urls is not None else
                               (() if index_url else (PYPI,))),
        installer=installer, checks=tuple(smoke_checks(families.architectures(sglang_version(pins)),
                                                      fp4_warmup=flashinfer_has_warmup(settings.patches_dir, pins),
                                                      flashinfer=pinned_version(pins, "flashinfer-python"))),
        extra_checks=tuple(extra_checks), env=tuple(env), log_file=log_file, upgrade_pip=upgrade_pip,
        pins_as_built=as_built, leave_out=tuple(leave_out),
    )
