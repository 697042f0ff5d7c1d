"""A fixture world for ``python -m fp4graph install`` (tests/install): a checkout whose wheels/ holds a
built stack (fixture sglang and flashinfer-python wheels, the static index, manifest.json,
the lock), and a PEP 691 index standing in for PyPI with the one dependency they need."""

from __future__ import annotations

import dataclasses
import pathlib
import shutil

from wheel.wheelfile import WheelFile

from fp4graph.model import manifest
from fp4graph.model.families import FAMILIES
from fp4graph.wheels.index import write_index, write_metadata_files
from harness.releases import Release, make_release

STACK = "sglang-9.0.0"
PINS = ["sglang==9.0.0+fp4graph.1", "flashinfer-python==9.0.0+fp4graph.1"]
# A flashinfer-only stack: ours beside PyPI's sglang 9.1.0 (the fixture PyPI serves it, and
# a pristine flashinfer-python 9.0.0 that must not be the one installed).
FLASHINFER_STACK = "flashinfer-9.0.0"
SERVED = "9.1.0"
SERVED_NAME = f"sglang-{SERVED}"
SERVED_PINS = [f"sglang=={SERVED}", "flashinfer-python==9.0.0+fp4graph.1"]
KERNEL = "fp4graph-fixture-kernel"  # provides the module sgl_kernel
CUBIN_ERROR = "RuntimeError: flashinfer-cubin version (9.0.0) does not match flashinfer version (9.0.0+fp4graph.1)"

_REGISTRY = """\
class _Registry:
    ARCHS = {archs!r}

    def get_supported_archs(self):
        return list(self.ARCHS)

    def resolve_model_cls(self, architectures):
        return type(architectures[0], (), {{}}), architectures[0]


ModelRegistry = _Registry()
"""

_LAUNCH = """\
import argparse

import sglang.srt.layers.quantization.modelopt_quant  # noqa: F401

parser = argparse.ArgumentParser(prog="launch_server")
parser.add_argument("--model-path")
parser.parse_args()
"""


def sglang_files() -> dict[str, str]:
    archs = [f.architecture for f in FAMILIES.values()]
    pkg = "python/sglang/"
    files = {pkg + p: "" for p in ("__init__.py", "srt/__init__.py", "srt/layers/__init__.py",
                                   "srt/layers/quantization/__init__.py", "srt/models/__init__.py")}
    files[pkg + "srt/layers/quantization/modelopt_quant.py"] = (
        "import flashinfer\nimport sgl_kernel\n\n\nclass ModelOptFp4Config:\n    pass\n\n\n"
        "class ModelOptFp4LinearMethod:\n    pass\n")
    files[pkg + "srt/models/registry.py"] = _REGISTRY.format(archs=archs)
    files[pkg + "launch_server.py"] = _LAUNCH
    return files


def flashinfer_files(*, cubin_mismatch: bool) -> dict[str, str]:
    body = '__version__ = "9.0.0+fp4graph.1"\n\n\ndef fp4_warmup(device=None, *, modules=None):\n    return []\n'
    if cubin_mismatch:  # what flashinfer/jit/env.py raises at import beside the real cubin
        body = f'raise RuntimeError("{CUBIN_ERROR.removeprefix("RuntimeError: ")}")\n'
    return {"flashinfer/__init__.py": body}


def plain_wheel(root: pathlib.Path, name: str, version: str, files: dict[str, str]) -> Release:
    dist = name.replace("-", "_")
    wheel = root / f"{dist}-{version}-py3-none-any.whl"
    with WheelFile(wheel, "w") as wf:
        for path, text in files.items():
            wf.writestr(path, text)
        info = f"{dist}-{version}.dist-info"
        wf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: fp4graph-tests\nRoot-Is-Purelib: true\n"
                    "Tag: py3-none-any\n")
    return Release(project=name, version=version, wheels=(wheel,), sdist=None)


@dataclasses.dataclass(frozen=True)
class World:
    repo: pathlib.Path  # a checkout: patches/stacks.toml, patches/locks/, wheels/
    pypi: str  # the index standing in for PyPI


def pypi_releases(root: pathlib.Path) -> list[Release]:
    """What the fixture PyPI serves: the kernel dependency at 9.0.0 (locked) and 9.1.0 (the
    newest, whose import fails); sglang 9.1.0 (pristine, pinning flashinfer-python==9.0.0
    as sglang pins its flashinfer) and PyPI's flashinfer-python 9.0.0 (pristine: its
    ``__version__`` lacks our label)."""
    pristine = {"flashinfer/__init__.py": '__version__ = "9.0.0"\n'}
    return [plain_wheel(root, KERNEL, "9.0.0", {"sgl_kernel/__init__.py": ""}),
            plain_wheel(root, KERNEL, "9.1.0", {"sgl_kernel/__init__.py": "raise ImportError('9.1')\n"}),
            make_release(root, "sglang", SERVED, sglang_files(), sdist=False,
                         requires=["flashinfer_python[cu13]==9.0.0", KERNEL]),
            make_release(root, "flashinfer-python", "9.0.0", pristine, sdist=False)]


def make_checkout(root: pathlib.Path, *, cubin_mismatch: bool) -> pathlib.Path:
    repo = root / "repo"
    (repo / "patches" / "locks").mkdir(parents=True)
    (repo / "patches" / "stacks.toml").write_text("")
    shutil.copytree(pathlib.Path(__file__).resolve().parents[2] / "src", repo / "src")
    built = root / "built"
    sglang = make_release(built, "sglang", "9.0.0+fp4graph.1", sglang_files(), sdist=False,
                          requires=["flashinfer-python==9.0.0", KERNEL])
    flashinfer = make_release(built, "flashinfer-python", "9.0.0+fp4graph.1",
                              flashinfer_files(cubin_mismatch=cubin_mismatch), sdist=False)
    wheels = repo / "wheels"
    wheels.mkdir()
    for release in (sglang, flashinfer):
        shutil.copy(release.wheel, wheels / release.wheel.name)
    write_metadata_files(wheels)
    write_index(wheels)
    (wheels / "locks").mkdir()
    for name, pins in ((STACK, PINS), (SERVED_NAME, SERVED_PINS)):
        lock = f"# fixture lock of {name}\n{KERNEL}==9.0.0\n"
        (repo / "patches" / "locks" / f"{name}.txt").write_text(lock)
        (wheels / "locks" / f"{name}.txt").write_text(lock)
        # As nox -s wheels publishes them: the pins a user's one command reads (-r).
        (wheels / "locks" / f"{name}.pins.txt").write_text(f"# fp4graph pins of stack {name}\n"
                                                            + "".join(p + "\n" for p in pins))
    ours = manifest.Pin.parse(PINS[1])
    written = manifest.Manifest(fp4graph="0.1.0", artifacts={}, stacks=(
        manifest.BuiltStack(name=STACK, artifacts=(), pins=tuple(manifest.Pin.parse(p) for p in PINS)),
        manifest.BuiltStack(name=FLASHINFER_STACK, artifacts=(), pins=(ours,),
                            served=(manifest.BuiltServed(sglang=SERVED),))))
    manifest.write(wheels / manifest.FILENAME, written)
    return repo
