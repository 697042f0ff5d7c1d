"""The pure-Python pins of an sglang release that the test venv does not meet, as a tree.

The simulations run every stack's sglang on the one test venv.  Where a release pins a
pure-Python library whose behaviour its own code depends on, the child gets that pin
first on its path: sglang 0.5.8.x pins transformers 4.57.1 and reads
``hf_config.rope_scaling["factor"]``, which transformers 5 (the venv's, sglang 0.5.11's
pin) no longer has.  The tree is a ``pip install --no-deps --target`` of the pin and of
those of its own requirements the venv does not meet (huggingface-hub<1.0 for
transformers 4.57.1), followed until none is left; cached per set of pins.

A family whose model type the pinned transformers lacks (GLM-5's ``glm_moe_dsa`` before
5.2.0) runs as ``nox -s integration`` runs it: with the newer transformers the
integration installs for it (:data:`fp4graph.model.families.NEWER_TRANSFORMERS`,
the test venv's), so a run holding such a family does not follow that pin.
"""

from __future__ import annotations

import email.parser
import hashlib
import importlib.metadata
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from fp4graph.model.families import Family

# The pins followed: pure-Python libraries whose API sglang's config code reads.
FOLLOWED = frozenset({"transformers"})
_ROUNDS = 8  # a requirement chain longer than this is a resolver's job, not ours


class PinnedPythonError(RuntimeError):
    pass


def _requirements(metadata: pathlib.Path) -> list[Requirement]:
    """The unconditional ``Requires-Dist`` of a METADATA file (no extras)."""
    message = email.parser.Parser().parsestr(metadata.read_text(encoding="utf-8"))
    out = []
    for line in message.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.append(req)
    return out


def _met(req: Requirement, versions: dict[str, str]) -> bool:
    have = versions.get(canonicalize_name(req.name))
    return have is not None and req.specifier.contains(have, prereleases=True)


def _venv_versions() -> dict[str, str]:
    return {canonicalize_name(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()}


def unmet_pins(sglang_tree: pathlib.Path, families: Iterable[Family] = ()) -> list[str]:
    """sglang's ``==`` pins of :data:`FOLLOWED` libraries that this interpreter does not
    meet, less a transformers pin older than one of ``families`` needs."""
    metadata = next(sglang_tree.glob("sglang-*.dist-info/METADATA"))
    venv = _venv_versions()
    newest_needed = max((Version(f.min_transformers) for f in families if f.min_transformers), default=None)
    out = []
    for req in _requirements(metadata):
        name = canonicalize_name(req.name)
        if name not in FOLLOWED or _met(req, venv):
            continue
        pinned = next((Version(s.version) for s in req.specifier if s.operator == "=="), None)
        if name == "transformers" and newest_needed is not None and (pinned is None or pinned < newest_needed):
            continue
        out.append(str(req))
    return sorted(out)


def _pip_target(target: pathlib.Path, requirement: str) -> None:
    """Install ``requirement`` into ``target``, merged with what is there: pip's own
    ``--target`` skips a top-level directory that exists (a namespace such as ``cuda`` or
    ``nvidia_cutlass_dsl``, shared by several distributions)."""
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".pip-") as staging:
        argv = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                "--no-deps", "--target", staging, requirement]
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode != 0:
            raise PinnedPythonError(f"pip could not install {requirement!r} for the simulation: "
                                    f"{result.stderr.strip()[-2000:]}")
        for item in pathlib.Path(staging).iterdir():
            if item.is_dir():
                shutil.copytree(item, target / item.name, symlinks=True, dirs_exist_ok=True)
            else:
                shutil.copy2(item, target / item.name)


def _tree_versions(target: pathlib.Path) -> dict[str, str]:
    out = {}
    for info in target.glob("*.dist-info"):
        meta = email.parser.Parser().parsestr((info / "METADATA").read_text(encoding="utf-8"))
        out[canonicalize_name(meta["Name"])] = meta["Version"]
    return out


def tree(pins: list[str], cache: pathlib.Path) -> pathlib.Path:
    """A directory holding ``pins`` and what they need beyond this interpreter's packages."""
    key = hashlib.sha256("\n".join([sys.version, *sorted(pins)]).encode()).hexdigest()[:16]
    root = cache / "pinned-python" / f"{'-'.join(p.replace('==', '-') for p in pins)}-{key}"
    if (root / ".complete").is_file():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(dir=root.parent, prefix=".tmp-"))
    try:
        wanted, venv = list(pins), _venv_versions()
        for _ in range(_ROUNDS):
            if not wanted:
                break
            for requirement in wanted:
                _pip_target(tmp, requirement)
            have = _tree_versions(tmp)
            wanted = sorted({str(r) for info in tmp.glob("*.dist-info")
                             for r in _requirements(info / "METADATA")
                             if not _met(r, have) and not _met(r, venv)})
        else:
            raise PinnedPythonError(f"{pins}: requirements still unmet after {_ROUNDS} rounds: {wanted}")
        (tmp / ".complete").write_text("\n".join(pins) + "\n")
        try:
            os.replace(tmp, root)
        except OSError:  # another worker finished first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root


def path_for(sglang_tree: pathlib.Path, cache: pathlib.Path, families: Iterable[Family] = ()) -> list[pathlib.Path]:
    """What goes first on the path of a child running ``families`` on ``sglang_tree``: the
    pins tree, or nothing."""
    pins = unmet_pins(sglang_tree, families)
    return [tree(pins, cache)] if pins else []


# The CuTe DSL (nvidia-cutlass-dsl: every sglang release pins it; ~290 MB installed, left
# out of the test venv) where FlashInfer's Python cannot run a model's path without it:
# 0.6.17's trtllm MLA decode imports it for every SM100+ device before it asks whether it
# may use it (mla/_core.py:2267, DeepSeek-V3.2 on sglang 0.5.18).  Elsewhere FlashInfer
# and sglang take their no-DSL paths.
CUTE_DSL = "nvidia-cutlass-dsl"
CUTE_DSL_FLASHINFER = frozenset({"0.6.17"})


def cute_dsl_path(sglang_tree: pathlib.Path, flashinfer: str, cache: pathlib.Path) -> list[pathlib.Path]:
    """sglang's nvidia-cutlass-dsl pin as a tree (and its ``dsl_packages``, which the
    package's ``.pth`` adds in a venv) for a child running FlashInfer ``flashinfer``, or
    nothing.  Without the pin's ``cu13`` extra: its CUDA 13 libraries are the device's."""
    if flashinfer not in CUTE_DSL_FLASHINFER or CUTE_DSL in _venv_versions():
        return []
    metadata = next(sglang_tree.glob("sglang-*.dist-info/METADATA"))
    pin = next((r for r in _requirements(metadata) if canonicalize_name(r.name) == CUTE_DSL), None)
    if pin is None:
        raise PinnedPythonError(f"{metadata}: no {CUTE_DSL} pin; FlashInfer {flashinfer} imports it")
    root = tree([f"{CUTE_DSL}{pin.specifier}"], cache)
    return [root, root / "nvidia_cutlass_dsl" / "dsl_packages"]
