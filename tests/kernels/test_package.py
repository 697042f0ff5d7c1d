"""The kernels wheel and wheels/ around it, without nvcc: a stand-in library as the module.

The wheel is flashinfer-jit-cache's layout and installs with pip; two packings are byte
identical; wheels/ gains it with its index page, PEP 658 file, SHA256SUMS line and manifest
record all at once (or not at all), ``pins --kernels`` names it, and ``nox -s wheels`` keeps
it while the flashinfer wheel it was built from is rebuilt byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import subprocess
import sys
import zipfile

import pytest

from fp4graph import cli
from fp4graph.model import manifest
from fp4graph.model.config import Settings
from fp4graph.model.errors import PublishError
from fp4graph.model.stacks import load
from fp4graph.wheels import build, kernels, publish
from fp4graph.wheels.kernels import cross, elf, exchange, outdir
from fp4graph.wheels.kernels.compile import ArchBuild, Module
from fp4graph.wheels.kernels.targets import Arch
from harness.checkout import STACK

FI = "flashinfer_python-0.6.3+fp4graph.1-py3-none-any.whl"
NAME = "fp4_quantization_120"
SM120 = Arch(12, 0)


def _made(settings: Settings, library: pathlib.Path, dest: pathlib.Path, *, arch: Arch = SM120,
          toolchain: dict[str, str] | None = None) -> tuple[pathlib.Path, manifest.BuiltKernels]:
    artifact = load(settings.stacks_file).artifact("flashinfer-python", "0.6.3")
    fi_sha = manifest.read_built(settings.wheels_dir).artifacts[artifact.key].wheels[0].sha256
    provenance = exchange.Provenance(stack=STACK, flashinfer=f"flashinfer-python=={artifact.patched_version}",
                                     flashinfer_sha256=fi_sha, cuda="13.0",
                                     toolchain=toolchain or {"nvcc": "13.0 (test)", "cxx": "c++ (test)"})
    sha = build.sha256_of(library)
    module = Module(kind="quantization", name=NAME, library=library, sha256=sha, seconds=None)
    dest.mkdir(parents=True, exist_ok=True)
    ((wheel, record),) = kernels.build_wheels(
        settings, artifact, provenance, [ArchBuild(arch=arch, modules=(module,), unfinished=(), log=None)], dest)
    return wheel, record


def test_the_wheel_is_flashinfer_jit_cache_and_reproducible(
    checkout: Settings, stand_in_library: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    wheel, record = _made(checkout, stand_in_library, tmp_path / "a")
    again, _ = _made(checkout, stand_in_library, tmp_path / "b")
    assert wheel.read_bytes() == again.read_bytes()
    tag = elf.platform_tag([stand_in_library])
    assert wheel.name == f"flashinfer_jit_cache-0.6.3+cu130.fp4graph.1.sm120a-py3-none-{tag}.whl"
    assert str(record.pin.version) == "0.6.3+cu130.fp4graph.1.sm120a"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert names[-1].endswith(".dist-info/RECORD")
        assert f"flashinfer_jit_cache/jit_cache/{NAME}/{NAME}.so" in names
        assert zf.read(f"flashinfer_jit_cache/jit_cache/{NAME}/{NAME}.so") == stand_in_library.read_bytes()
        info = zf.getinfo(f"flashinfer_jit_cache/jit_cache/{NAME}/{NAME}.so")
        assert (info.external_attr >> 16) & 0o777 == 0o755
        built_from = json.loads(zf.read("flashinfer_jit_cache/fp4graph.json"))
        assert built_from["flashinfer"] == "flashinfer-python==0.6.3+fp4graph.1"
        assert built_from["modules"] == [{"kind": "quantization", "name": NAME, "sha256": record.modules[0].sha256}]
        meta = zf.read("flashinfer_jit_cache-0.6.3+cu130.fp4graph.1.sm120a.dist-info/METADATA").decode()
        assert "Name: flashinfer-jit-cache\n" in meta and "Version: 0.6.3+cu130.fp4graph.1.sm120a\n" in meta
        wheel_file = zf.read("flashinfer_jit_cache-0.6.3+cu130.fp4graph.1.sm120a.dist-info/WHEEL").decode()
        assert "Root-Is-Purelib: false\n" in wheel_file and f"Tag: py3-none-{tag}\n" in wheel_file

    # pip installs it here (the tag fits this machine), and its API is upstream's.
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(site),
                    str(wheel)], check=True)
    code = ("import flashinfer_jit_cache as c, pathlib; d = pathlib.Path(c.get_jit_cache_dir()); "
            f"print(c.__version__, c.__git_version__, (d / {NAME!r} / {NAME + '.so'!r}).is_file())")
    out = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(site)}, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["0.6.3+cu130.fp4graph.1.sm120a", "d0886ce2b67761a5b4f9396b4c3741f7860791b0", "True"]


def test_another_toolchain_is_another_wheel(checkout: Settings, stand_in_library: pathlib.Path,
                                            tmp_path: pathlib.Path) -> None:
    one, _ = _made(checkout, stand_in_library, tmp_path / "a")
    other, _ = _made(checkout, stand_in_library, tmp_path / "b", toolchain={"nvcc": "13.1 (test)"})
    assert one.name == other.name and one.read_bytes() != other.read_bytes()


def test_wheels_dir_gains_the_wheel_index_sums_and_manifest(
    checkout: Settings, stand_in_library: pathlib.Path, tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    made = [_made(checkout, stand_in_library, tmp_path / "made", arch=a) for a in (Arch(12, 0), Arch(12, 1))]
    written = outdir.add_kernels(checkout.wheels_dir, made)
    out = checkout.wheels_dir
    names = [w.name for w, _ in made]
    assert manifest.read_built(out) == dataclasses.replace(written, path=out / "manifest.json")
    assert [k.filename for k in written.kernels] == sorted(names)
    sums = dict(line.split("  ")[::-1] for line in (out / "SHA256SUMS").read_text().splitlines())
    assert sorted(sums) == sorted([FI, "sglang-0.5.9+fp4graph.1-py3-none-any.whl", *names])
    for wheel, record in made:
        assert sums[wheel.name] == record.sha256 == build.sha256_of(out / wheel.name)
        assert (out / f"{wheel.name}.metadata").exists()
    page = (out / "simple" / "flashinfer-jit-cache" / "index.html").read_text()
    assert all(f"#sha256={r.sha256}" in page for _, r in made)
    assert '<a href="flashinfer-jit-cache/">' in (out / "simple" / "index.html").read_text()

    monkeypatch.chdir(checkout.repo)
    assert cli.main(["pins", STACK, "--kernels", "12.1a"]) == 0
    assert capsys.readouterr().out.split() == [
        "sglang==0.5.9+fp4graph.1", "flashinfer-python==0.6.3+fp4graph.1",
        "flashinfer-jit-cache==0.6.3+cu130.fp4graph.1.sm121a",
    ]
    assert cli.main(["pins", STACK, "--kernels", "12.0f"]) == 2
    assert "0 kernels wheels of sglang-0.5.9 for 12.0f" in capsys.readouterr().err

    # nox -s wheels rebuilds the same flashinfer wheel: the kernels wheels stay ...
    build.build(checkout, [STACK])
    assert [k.filename for k in manifest.read_built(out).kernels] == sorted(names)
    assert all(n in (out / "SHA256SUMS").read_text() for n in names)
    assert (out / "simple" / "flashinfer-jit-cache" / "index.html").exists()
    # ... and go with a flashinfer wheel of other bytes (a changed series).
    for patch in checkout.patches_dir.glob("flashinfer-python/0.6.3/0001-*.patch"):
        patch.write_text(patch.read_text().replace("Last-Update: 2026-11-29", "Last-Update: 2026-11-30"))
    build.build(checkout, [STACK])
    assert manifest.read_built(out).kernels == ()
    assert not list(out.glob("flashinfer_jit_cache-*")) and not (out / "simple" / "flashinfer-jit-cache").exists()


def test_a_failed_addition_leaves_wheels_as_they_were(
    checkout: Settings, stand_in_library: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    before = {str(p.relative_to(checkout.wheels_dir)): p.read_bytes()
              for p in sorted(checkout.wheels_dir.rglob("*")) if p.is_file()}
    wheel, record = _made(checkout, stand_in_library, tmp_path / "made")
    gone = tmp_path / "gone.whl"
    with pytest.raises(FileNotFoundError):
        outdir.add_kernels(checkout.wheels_dir, [(wheel, record), (gone, dataclasses.replace(record, filename="x.whl"))])
    after = {str(p.relative_to(checkout.wheels_dir)): p.read_bytes()
             for p in sorted(checkout.wheels_dir.rglob("*")) if p.is_file()}
    assert after == before
    assert sorted(p.name for p in checkout.repo.iterdir()) == ["patches", "wheels"]


def test_kernels_refuses_a_wheels_dir_of_another_flashinfer_build(checkout: Settings) -> None:
    (checkout.wheels_dir / "manifest.json").unlink()
    options = kernels.KernelOptions(stack=STACK, archs=(Arch(12, 0),), kinds=("probe",))
    with pytest.raises(manifest.ManifestError, match="run `nox -s wheels` first"):
        kernels.build(checkout, options)


def test_an_export_in_parts_imports_to_the_same_wheel(
    checkout: Settings, stand_in_library: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """What a machine with cores exports (parts of at most part_size bytes) packs here into
    the wheel a local build of the same modules makes; a damaged part is refused."""
    direct, record = _made(checkout, stand_in_library, tmp_path / "direct")
    provenance = exchange.Provenance(stack=STACK, flashinfer=record.flashinfer.requirement,
                                     flashinfer_sha256=record.flashinfer_sha256, cuda="13.0",
                                     toolchain={"nvcc": "13.0 (test)", "cxx": "c++ (test)"})
    module = Module(kind="quantization", name=NAME, library=stand_in_library, sha256=record.modules[0].sha256,
                    seconds=12.5)
    builds = [ArchBuild(arch=SM120, modules=(module,), unfinished=(), log=None)]
    written = exchange.export(tmp_path / "out", builds, provenance, part_size=64 * 1024)
    parts = [p for p in written if ".tar.xz." in p.name]
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", p.name) for p in written), written
    assert len(parts) > 1 and all(p.stat().st_size <= 64 * 1024 for p in parts)
    options = kernels.KernelOptions(stack=STACK, archs=(SM120,), kinds=("quantization",),
                                    import_dirs=(tmp_path / "out",))
    outcome = kernels.build(checkout, options)
    (imported,) = outcome.wheels
    assert imported.sha256 == record.sha256 == build.sha256_of(direct)
    assert outcome.seconds[("12.0a", NAME)] == 12.5  # the building machine's time, reported
    assert (checkout.wheels_dir / imported.filename).read_bytes() == direct.read_bytes()

    parts[0].write_bytes(b"x" + parts[0].read_bytes()[1:])
    with pytest.raises(kernels.KernelsError, match=r"\.tar\.xz\.000: sha256 is not the recorded"):
        kernels.build(checkout, dataclasses.replace(options, use_cache=False, import_dirs=(tmp_path / "out",)))


def test_an_import_of_another_flashinfer_build_is_refused(
    checkout: Settings, stand_in_library: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    provenance = exchange.Provenance(stack=STACK, flashinfer="flashinfer-python==0.6.3+fp4graph.1",
                                     flashinfer_sha256="0" * 64, cuda="13.0", toolchain={"nvcc": "13.0 (test)"})
    module = Module(kind="quantization", name=NAME, library=stand_in_library,
                    sha256=build.sha256_of(stand_in_library), seconds=None)
    exchange.export(tmp_path / "out", [ArchBuild(arch=SM120, modules=(module,), unfinished=(), log=None)], provenance)
    options = kernels.KernelOptions(stack=STACK, archs=(SM120,), kinds=("quantization",),
                                    import_dirs=(tmp_path / "out",))
    with pytest.raises(kernels.KernelsError, match=r"sha256 0{64}\), not this checkout's"):
        kernels.build(checkout, options)


def test_publish_of_one_project_finds_only_its_wheels(checkout: Settings) -> None:
    with pytest.raises(PublishError, match="no wheels of flashinfer-jit-cache to publish"):
        publish.publish(checkout.wheels_dir, "http://127.0.0.1:9/", projects=["flashinfer_jit_cache"])


def test_a_dgx_spark_wheel_is_tagged_aarch64_and_shares_the_pin_of_its_arch(
    checkout: Settings, stand_in_library: pathlib.Path, aarch64_stand_in: pathlib.Path,
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """The 12.1a wheels of both platforms: one version, two platform tags; ``pins`` names it once."""
    x86, x86_record = _made(checkout, stand_in_library, tmp_path / "x86", arch=Arch(12, 1))
    arm, arm_record = _made(checkout, aarch64_stand_in, tmp_path / "arm", arch=Arch(12, 1),
                            toolchain={"nvcc": "13.0 (test)", "platform": "linux-aarch64"})
    assert x86.name.endswith("_x86_64.whl") and arm.name.endswith("_aarch64.whl"), (x86.name, arm.name)
    assert x86_record.pin == arm_record.pin and x86.name.split("-py3-")[0] == arm.name.split("-py3-")[0]
    outdir.add_kernels(checkout.wheels_dir, [(x86, x86_record), (arm, arm_record)])
    monkeypatch.chdir(checkout.repo)
    assert cli.main(["pins", STACK, "--kernels", "12.1a"]) == 0
    assert capsys.readouterr().out.split()[-1] == "flashinfer-jit-cache==0.6.3+cu130.fp4graph.1.sm121a"


def test_modules_of_another_machine_than_the_platform_are_refused(
    stand_in_library: pathlib.Path, aarch64_stand_in: pathlib.Path
) -> None:
    def build_of(library: pathlib.Path) -> ArchBuild:
        module = Module(kind="probe", name="fp4graph_probe", library=library, sha256="0" * 64, seconds=None)
        return ArchBuild(arch=Arch(12, 1), modules=(module,), unfinished=(), log=None)

    kernels.check_machine([build_of(aarch64_stand_in)], cross.LINUX_AARCH64)
    with pytest.raises(kernels.KernelsError, match=rf"modules for linux-aarch64 must be aarch64 ELF files:\n"
                                                   rf"  {re.escape(str(stand_in_library))} \(12.1a fp4graph_probe\) is x86_64"):
        kernels.check_machine([build_of(stand_in_library)], cross.LINUX_AARCH64)
    with pytest.raises(kernels.KernelsError, match="must be x86_64 ELF files"):
        kernels.check_machine([build_of(aarch64_stand_in)], cross.LINUX_X86_64)


def test_an_aarch64_export_is_named_and_imported_for_its_platform_only(
    checkout: Settings, stand_in_library: pathlib.Path, aarch64_stand_in: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """What a GB10 runner exports (native aarch64 modules) packs here into the aarch64 wheel;
    an x86_64 export of the same arch beside it is not taken for it, nor it for x86_64."""
    direct, record = _made(checkout, aarch64_stand_in, tmp_path / "direct", arch=Arch(12, 1))
    provenance = exchange.Provenance(stack=STACK, flashinfer=record.flashinfer.requirement,
                                     flashinfer_sha256=record.flashinfer_sha256, cuda="13.0",
                                     toolchain={"nvcc": "13.0 (test)", "cxx": "c++ (test)"})
    arm = Module(kind="quantization", name=NAME, library=aarch64_stand_in, sha256=record.modules[0].sha256,
                 seconds=None)
    x86 = dataclasses.replace(arm, library=stand_in_library, sha256=build.sha256_of(stand_in_library))
    written = exchange.export(tmp_path / "out", [ArchBuild(arch=Arch(12, 1), modules=(arm,), unfinished=(), log=None)],
                              provenance, target=cross.LINUX_AARCH64)
    assert {p.name for p in written} == {"kernels-0.6.3_fp4graph.1-12.1a-linux-aarch64.json",
                                        "kernels-0.6.3_fp4graph.1-12.1a-linux-aarch64.tar.xz.000"}
    exchange.export(tmp_path / "out", [ArchBuild(arch=Arch(12, 1), modules=(x86,), unfinished=(), log=None)],
                    provenance)
    options = kernels.KernelOptions(stack=STACK, archs=(Arch(12, 1),), kinds=("quantization",),
                                    import_dirs=(tmp_path / "out",), platform=cross.LINUX_AARCH64)
    (imported,) = kernels.build(checkout, options).wheels
    assert imported.sha256 == record.sha256 == build.sha256_of(direct)
    (x86_imported,) = kernels.build(checkout, dataclasses.replace(options, platform=cross.LINUX_X86_64)).wheels
    assert x86_imported.filename.endswith("_x86_64.whl")
    with pytest.raises(kernels.KernelsError, match="no linux-aarch64 export of 12.0a"):
        kernels.build(checkout, dataclasses.replace(options, archs=(SM120,)))
