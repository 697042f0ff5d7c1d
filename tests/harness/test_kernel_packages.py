"""harness.kernel_packages: the cubin unpacking and the kernel-package stand-ins."""

from __future__ import annotations

import pathlib
import zipfile

import pytest
from wheel.wheelfile import WheelError, WheelFile

from fp4graph.model import config
from fp4graph.model.stacks import ArtifactFile
from harness import kernel_packages
from harness.child import run_python, tail

# The shape of the real package's __init__.py: its version from _build_meta.
INIT = (
    "from pathlib import Path\nfrom . import _build_meta\n__version__ = _build_meta.__version__\n"
    "def get_cubin_dir():\n    return str(Path(__file__).parent / 'cubins')\n"
)


def _cubin_wheel(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "flashinfer_cubin-9.0-py3-none-any.whl"
    with WheelFile(path, "w") as wf:
        wf.writestr("flashinfer_cubin/__init__.py", INIT)
        wf.writestr("flashinfer_cubin/_build_meta.py", '__version__ = "9.0"\n')
        wf.writestr("flashinfer_cubin/cubins/abc/gemm/k.cubin", b"\x7fELF" + b"\0" * 64)
        wf.writestr("flashinfer_cubin/cubins/abc/gemm/k.cubin.lock", b"")
        wf.writestr("flashinfer_cubin/cubins/abc/gemm/checksums.txt", "k.cubin 0\n")
        wf.writestr("flashinfer_cubin-9.0.dist-info/METADATA",
                    "Metadata-Version: 2.1\nName: flashinfer-cubin\nVersion: 9.0\n")
        wf.writestr("flashinfer_cubin-9.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n")
    return path


def test_unpack_leaves_out_only_the_cubin_blobs(tmp_path: pathlib.Path) -> None:
    dest = tmp_path / "tree"
    assert kernel_packages.unpack_without_blobs(_cubin_wheel(tmp_path), dest) == 1
    files = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert files == [
        "flashinfer_cubin-9.0.dist-info/METADATA",
        "flashinfer_cubin-9.0.dist-info/RECORD",
        "flashinfer_cubin-9.0.dist-info/WHEEL",
        "flashinfer_cubin/__init__.py",
        "flashinfer_cubin/_build_meta.py",
        "flashinfer_cubin/cubins/abc/gemm/checksums.txt",
        "flashinfer_cubin/cubins/abc/gemm/k.cubin.lock",
    ]


def test_unpack_checks_each_member_against_record(tmp_path: pathlib.Path) -> None:
    wheel = _cubin_wheel(tmp_path)
    tampered = tmp_path / "tampered" / wheel.name
    tampered.parent.mkdir()
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tampered, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, data.replace(b"9.0", b"6.6") if info.filename.endswith("_build_meta.py") else data)
    with pytest.raises(WheelError, match="Hash mismatch"):
        kernel_packages.unpack_without_blobs(tampered, tmp_path / "tree")


def test_cubin_tree_takes_only_a_cubin_pin(tmp_path: pathlib.Path) -> None:
    settings = config.Settings(repo=tmp_path, cache_dir=tmp_path / "cache")
    other = ArtifactFile(filename="flashinfer_python-0.6.3-py3-none-any.whl", sha256="0" * 64)
    with pytest.raises(ValueError, match="is not a flashinfer-cubin wheel"):
        kernel_packages.cubin_tree(settings, other)


def test_stand_ins_import_with_their_versions_and_metadata(tmp_path: pathlib.Path) -> None:
    real = tmp_path / "real"
    kernel_packages.unpack_without_blobs(_cubin_wheel(tmp_path), real)
    cubin = kernel_packages.cubin_stand_in(tmp_path / "cubin", "9.1", like=real)
    jit = kernel_packages.jit_cache_stand_in(tmp_path / "jit", "9.1+cu130")
    code = (
        "import importlib.metadata as md, pathlib, flashinfer_cubin as c, flashinfer_jit_cache as j\n"
        "assert c.__version__ == md.version('flashinfer-cubin') == '9.1'\n"
        "assert pathlib.Path(c.get_cubin_dir()).is_dir()\n"
        "assert j.__version__ == md.version('flashinfer-jit-cache') == '9.1+cu130'\n"
        "assert pathlib.Path(j.get_jit_cache_dir()).is_dir()\n"
        "[p] = j.get_jit_cache_providers()\n"
        "assert p.version == j.__version__ and pathlib.Path(p.jit_cache_dir).is_dir()\n"
        "print('OK', p.provider_id, sorted(p.cuda_architectures), sorted(p.modules))\n"
    )
    result = run_python(code, path=[cubin, jit])
    assert result.returncode == 0 and result.stdout.startswith("OK sm120f"), tail(result)


def test_jit_cache_stand_in_holds_the_modules_asked_for(tmp_path: pathlib.Path) -> None:
    names = ["fp4_quantization_120f", "fused_moe_120"]
    jit = kernel_packages.jit_cache_stand_in(tmp_path / "jit", "9.1+cu130", modules=names)
    code = (
        "import pathlib, flashinfer_jit_cache as j\n"
        "[p] = j.get_jit_cache_providers()\n"
        "for d in (j.get_jit_cache_dir(), p.jit_cache_dir):\n"
        "    print(sorted(str(f.relative_to(d)) for f in pathlib.Path(d).rglob('*.so')))\n"
        "print(sorted(p.modules))\n"
    )
    result = run_python(code, path=[jit])
    expected = str(sorted(f"{n}/{n}.so" for n in names))
    assert result.returncode == 0, tail(result)
    assert result.stdout.splitlines() == [expected, expected, str(names)], tail(result)
