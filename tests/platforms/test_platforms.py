"""fp4graph.platforms: the target platforms' wheel tags, and the emulated aarch64 python."""

from __future__ import annotations

import hashlib
import pathlib
import subprocess

import pytest

from fp4graph.model import locks, stacks
from fp4graph.model.config import default_cache_dir
from fp4graph.model.errors import ConfigError, HashMismatchError
from fp4graph.model.locks import LockedPin
from fp4graph.platforms import emulator, overrides
from fp4graph.platforms.targets import LINUX_AARCH64, LINUX_X86_64, platform_named

REPO = pathlib.Path(__file__).resolve().parents[2]
SGLANG = "sglang-0.5.11-cp311-cp311-manylinux_2_34_{}.whl"


def test_each_platform_takes_its_own_wheels_and_pure_ones() -> None:
    assert LINUX_AARCH64.accepts(SGLANG.format("aarch64"))
    assert not LINUX_AARCH64.accepts(SGLANG.format("x86_64"))
    assert LINUX_X86_64.accepts(SGLANG.format("x86_64"))
    assert not LINUX_X86_64.accepts(SGLANG.format("aarch64"))
    for p in (LINUX_AARCH64, LINUX_X86_64):
        assert p.accepts("flashinfer_python-0.6.7.post3-py3-none-any.whl")
        assert not p.accepts("torch-2.9.1-cp311-none-macosx_11_0_arm64.whl")
    assert LINUX_AARCH64.accepts("sgl_kernel-0.3.21-cp310-abi3-manylinux2014_aarch64.whl")
    assert LINUX_AARCH64.uv_platform == "aarch64-manylinux_2_34"


def test_an_unknown_platform_is_named() -> None:
    with pytest.raises(ConfigError, match="'linux-arm64'.*linux-x86_64, linux-aarch64"):
        platform_named("linux-arm64")


def test_every_pin_is_a_debian_pool_path_with_a_sha256() -> None:
    for deb in (emulator.QEMU, *emulator.DEBS):
        assert deb.pool_path.startswith("pool/main/") and deb.filename.endswith(".deb")
        assert len(deb.sha256) == 64 and int(deb.sha256, 16) >= 0
    assert emulator.QEMU.filename.endswith("_amd64.deb")
    assert all(d.filename.endswith(("_arm64.deb", "_all.deb")) for d in emulator.DEBS)


def test_a_cached_deb_with_another_hash_is_refused(tmp_path: pathlib.Path) -> None:
    deb = emulator.Deb(pool_path="pool/main/x/x/x_1_arm64.deb", sha256=hashlib.sha256(b"a").hexdigest())
    (tmp_path / "debian").mkdir()
    (tmp_path / "debian" / deb.filename).write_bytes(b"b")
    with pytest.raises(HashMismatchError, match="x_1_arm64.deb: expected .*emulator.py"):
        emulator.fetch_deb(tmp_path, deb)


@pytest.mark.slow
def test_the_emulated_python_is_aarch64() -> None:
    """Downloads the pinned .deb files (~70 MB) once into the fp4graph cache."""
    argv = emulator.aarch64_python(default_cache_dir())
    code = "import platform, sys, sysconfig; print(platform.machine(), sys.version_info[:2], sysconfig.get_platform())"
    out = subprocess.run([*argv, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["aarch64", "(3,", "11)", "linux-aarch64"]


@pytest.mark.slow
def test_the_emulated_python_reads_an_aarch64_cpuinfo() -> None:
    """qemu-user shows the host's x86 /proc/cpuinfo, on which torch 2.13.0's aarch64
    libtorch_cpu.so (pytorch/cpuinfo) segfaults at `import torch`: the root serves its own."""
    argv = emulator.aarch64_python(default_cache_dir())
    code = "print(open('/proc/cpuinfo').read())"
    out = subprocess.run([*argv, "-c", code], capture_output=True, text=True, check=True).stdout
    entries = [e for e in out.split("\n\n") if e.strip()]
    assert entries and all("CPU implementer\t: 0x41" in e and "CPU part\t: 0xd85" in e for e in entries), out[:300]
    assert "vendor_id" not in out
    assert len(entries) == len(emulator.cpuinfo(emulator.host_processors()).split("\n\n")) - 1


def test_an_override_splits_the_lock_line_by_machine() -> None:
    override = overrides.Override(platform=LINUX_AARCH64, stacks=("s",), requirement="tms==0.0.9.post1", why="w")
    pins = [LockedPin(name="tms", version="0.0.9"), LockedPin(name="six", version="1.0"),
            LockedPin(name="av", version="1", marker='platform_machine == "aarch64"')]
    assert [p.line for p in overrides.split_lines(pins, [override])] == [
        'tms==0.0.9 ; platform_machine != "aarch64"', 'tms==0.0.9.post1 ; platform_machine == "aarch64"',
        "six==1.0", 'av==1 ; platform_machine == "aarch64"']
    lock = locks.make("s", [], overrides.split_lines(pins, [override]))
    assert lock.versions({"platform_machine": "aarch64"})["tms"] == "0.0.9.post1"
    assert lock.versions({"platform_machine": "x86_64"})["tms"] == "0.0.9"


def test_a_bad_platforms_entry_names_the_file_and_entry(tmp_path: pathlib.Path) -> None:
    (tmp_path / "platforms.toml").write_text(
        '[[override]]\nplatform = "linux-arm64"\nstacks = ["s"]\nrequirement = "a==1"\nwhy = "w"\n')
    with pytest.raises(ConfigError, match=r"platforms.toml: \[\[override\]\] #1: unknown platform 'linux-arm64'"):
        overrides.read(tmp_path)
    (tmp_path / "platforms.toml").write_text(
        '[[torch]]\nplatform = "linux-aarch64"\nstacks = ["s"]\nrequirement = "torch>=2"\nwhy = "w"\nindex = "i"\n')
    with pytest.raises(ConfigError, match=r"\[\[torch\]\] #1: 'torch>=2' is not an exact name==version"):
        overrides.read(tmp_path)
    (tmp_path / "platforms.toml").write_text(
        '[[build]]\nplatform = "linux-aarch64"\nstacks = ["s"]\nrequirement = "torch==2+cu130"\nwhy = "w"\nindex = "i"\n')
    with pytest.raises(ConfigError, match=r"\[\[build\]\] #1: 'torch==2\+cu130' belongs in \[\[torch\]\]"):
        overrides.read(tmp_path)


def test_the_committed_platform_entries_match_the_stacks_and_their_locks() -> None:
    """Every stack named exists; an override's stacks' locks carry the split lines; a torch
    build is the stack's own torch with a local (CUDA) label, another build the locked
    version with one; each build is named in its stacks' lock headers."""
    catalog = stacks.load(REPO / "patches" / "stacks.toml")
    found_overrides, torches = overrides.read(REPO / "patches" / "locks")
    assert found_overrides and torches
    for override in found_overrides:
        for name in override.stacks:
            catalog.stack(name)
            lock = locks.read(locks.lock_path(REPO / "patches", name))
            assert lock.versions({"platform_machine": "aarch64", "python_full_version": "3.11.2",
                                  "sys_platform": "linux"})[override.name] == override.version
            assert any(line.startswith("Overridden on linux-aarch64") for line in lock.header)
    for build in torches:
        for name in build.stacks:
            version = build.requirement.split("==")[1]
            assert "+cu" in version and any(line.startswith(f"On linux-aarch64: {build.requirement} from ")
                                            for line in locks.read(locks.lock_path(REPO / "patches", name)).header)
            if build.name == "torch":
                assert version.split("+")[0] == catalog.stack(name).torch
            else:  # the CUDA build of the version the stack's lock pins
                lock = locks.read(locks.lock_path(REPO / "patches", name))
                assert lock.versions({"platform_machine": "aarch64", "sys_platform": "linux"})[
                    build.name] == version.split("+")[0]
