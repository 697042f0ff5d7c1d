"""Run a bundle: each upstream file in a fresh pytest process per install, with a budget."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from ...model.errors import SuiteError
from ...model.log import log
from . import report
from .bundle import VARIANTS, Bundle
from .selection import Selected, matches

PLUGIN = "fp4graph_suite_plugin"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunOptions:
    python: str = sys.executable
    budget_s: float | None = None  # every file's budget
    budget_scale: float = 1.0
    deadline: float | None = None  # Unix time by which the whole run ends
    files: tuple[str, ...] = ()  # fnmatch patterns of files to keep
    areas: tuple[str, ...] = ()
    jit_cache: str = "auto"  # auto | shared | separate
    pytest_args: tuple[str, ...] = ()
    grace_s: float = 30.0  # after the budget, before the run is killed


def _plugin_dir(work: pathlib.Path) -> pathlib.Path:
    d = work / "plugin"
    d.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pathlib.Path(__file__).with_name("plugin.py"), d / f"{PLUGIN}.py")
    return d


def _read_events(path: pathlib.Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            events.append(json.loads(line))
    return events


def run_file(
    *,
    python: str,
    tests_root: pathlib.Path,
    site: pathlib.Path,
    plugin: pathlib.Path,
    selected: Selected,
    budget_s: float,
    grace_s: float,
    results: pathlib.Path,
    log_path: pathlib.Path,
    env_extra: dict[str, str],
    pytest_args: Sequence[str] = (),
) -> dict[str, Any]:
    """One pytest process on one upstream file against one install; its outcomes."""
    results.unlink(missing_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    env.update(env_extra)
    inherited = os.environ.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(site), str(plugin), *([inherited] if inherited else [])]
    )
    start = time.time()
    env.update(
        FP4GRAPH_SUITE_RESULTS=str(results),
        FP4GRAPH_SUITE_DEADLINE=str(start + budget_s),
        FP4GRAPH_SUITE_BUDGET=str(round(budget_s)),
        PYTHONDONTWRITEBYTECODE="1",
    )
    # tee-sys: what a test prints still reaches the log when its process dies (a CUDA fault,
    # a segfault), where pytest's own capture would take it down with the process.
    cmd = [python, "-m", "pytest", selected.path, "-p", PLUGIN, "-p", "no:cacheprovider",
           "-q", "-rN", "--capture=tee-sys", *selected.args, *pytest_args]
    log(f"{site.name}: {subprocess.list2cmdline(cmd)} (budget {budget_s:.0f} s)")
    killed = False
    with log_path.open("w", encoding="utf-8") as out:
        out.write(f"$ {subprocess.list2cmdline(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(cmd, cwd=tests_root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            returncode = proc.wait(timeout=budget_s + grace_s)
        except subprocess.TimeoutExpired:
            killed = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            returncode = proc.wait()
    events = _read_events(results)
    return {
        "path": selected.path,
        "returncode": returncode,
        "killed": killed,
        "wall_s": round(time.time() - start, 1),
        "budget_s": round(budget_s),
        "events": events,
        "log_tail": log_path.read_text(encoding="utf-8", errors="replace")[-6000:],
    }


@contextlib.contextmanager
def _site_at(bundle: Bundle, variant: str, shared: bool) -> Iterator[pathlib.Path]:
    """The install of ``variant``; in shared-JIT mode moved to one path for both variants."""
    site = bundle.site(variant)
    if not shared:
        yield site
        return
    common = bundle.path / "site"
    site.rename(common)
    try:
        yield common
    finally:
        common.rename(site)


@functools.cache
def probe_device(python: str) -> dict[str, Any]:
    """torch, CUDA and the GPU as the test interpreter sees them (no wheel under test loaded)."""
    code = (
        "import json, platform\n"
        "info = {'python': platform.python_version()}\n"
        "try:\n"
        "    import torch\n"
        "    info.update(torch=torch.__version__, cuda=torch.version.cuda,\n"
        "                cuda_available=torch.cuda.is_available())\n"
        "    if info['cuda_available']:\n"
        "        info.update(gpu=torch.cuda.get_device_name(0),\n"
        "                    capability=list(torch.cuda.get_device_capability(0)))\n"
        "except Exception as exc:\n"
        "    info['torch_error'] = repr(exc)\n"
        "print(json.dumps(info))\n"
    )
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    try:
        info: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        info = {"probe_error": (result.stderr or result.stdout).strip()[-500:]}
    return info


def no_gpu_reason(bundle: Bundle, device: dict[str, Any]) -> str | None:
    """Why ``bundle`` cannot run on ``device``: its tests need a GPU and torch sees none.

    None where torch itself did not import: that is a missing requirement, not a machine
    without a GPU (:func:`.interpreter.unmet` names it).
    """
    if bundle.manifest.get("needs_cuda") and "torch" in device and not device.get("cuda_available"):
        return "its tests need a CUDA GPU and torch sees none"
    return None


def _chosen(bundle: Bundle, options: RunOptions) -> list[Selected]:
    files = [Selected(path=f["path"], area=f["area"], budget_s=f["budget_s"], args=tuple(f["args"]))
             for f in bundle.manifest["files"]]
    if options.files:
        files = [f for f in files if any(matches(f.path, p) or f.path == p for p in options.files)]
    if options.areas:
        files = [f for f in files if any(a in f.area for a in options.areas)]
    return files


def run_bundle(bundle: Bundle, work: pathlib.Path, options: RunOptions) -> dict[str, Any]:
    """Run the bundle's files against both installs and compare them: the report (a dict)."""
    m = bundle.manifest
    device = dict(probe_device(options.python))
    shared = False
    if m.get("jit_env"):
        if options.jit_cache == "shared" and not m.get("jit_shareable"):
            raise SuiteError(f"{bundle.path}: the two installs differ beyond Python files: "
                             "they cannot share a JIT cache (use --jit-cache separate)")
        shared = options.jit_cache == "shared" or (options.jit_cache == "auto" and m["jit_shareable"])
    plugin = _plugin_dir(work)
    files = _chosen(bundle, options)
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    skipped: dict[str, str] = {}
    skip_reason = no_gpu_reason(bundle, device)
    if skip_reason:
        skipped = {f.path: skip_reason for f in files}
        files = []
    for selected in files:
        budget = options.budget_s if options.budget_s is not None else selected.budget_s * options.budget_scale
        if options.deadline is not None:
            left = options.deadline - time.time() - 2 * options.grace_s
            if left < 2 * 15:
                skipped[selected.path] = "not run: the session deadline is near"
                continue
            budget = min(budget, left / 2)
        runs[selected.path] = {}
        for variant in VARIANTS:
            slug = selected.path.replace("/", "_")
            env_extra = {}
            if m.get("jit_env"):
                env_extra[m["jit_env"]] = str(work / ("jit" if shared else f"jit-{variant}"))
            with _site_at(bundle, variant, shared) as site:
                runs[selected.path][variant] = run_file(
                    python=options.python, tests_root=bundle.tests_root, site=site, plugin=plugin,
                    selected=selected, budget_s=budget, grace_s=options.grace_s,
                    results=work / variant / f"{slug}.jsonl", log_path=work / variant / f"{slug}.log",
                    env_extra=env_extra, pytest_args=(*m.get("pytest_args", ()), *options.pytest_args),
                )
    return report.build(
        manifest=m, device=device, runs=runs, skipped=skipped, jit_shared=shared,
        selected=[f.to_json() for f in _chosen(bundle, options)], skip_reason=skip_reason,
    )
