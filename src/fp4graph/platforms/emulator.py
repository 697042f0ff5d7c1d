"""An aarch64 python3.11 on an x86_64 machine: qemu-user plus Debian's arm64 packages.

:func:`aarch64_python` is the argv prefix that runs it::

    subprocess.run([*aarch64_python(settings.cache_dir), "-c", "import platform; print(platform.machine())"])

prints ``aarch64``.  It is built once, rootless, from the Debian 12 (bookworm) ``.deb`` files
pinned below by sha256 (downloaded, checked, unpacked with ``dpkg-deb -x``; no
``dpkg --add-architecture``, no binfmt registration), under ``<cache>/aarch64/``.  Only that
process is emulated: a subprocess it starts runs natively (an aarch64 ``sys.executable``
cannot), so what we run under it runs in-process.  On an aarch64 machine (a DGX Spark) use
the native interpreter instead: :func:`aarch64_python` is for x86_64 hosts.

Debian keeps only a stable release's current point versions in its pool: when a pin stops
downloading (HTTP 404), take the version ``apt-cache show PACKAGE`` names, its arm64 file's
sha256, and update :data:`DEBS` (or point FP4GRAPH_DEBIAN_MIRROR at a mirror that keeps it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request

from ..model.errors import FetchError, Fp4graphError, HashMismatchError
from ..model.files import atomic_directory, atomic_file, sha256_of
from ..model.log import log

DEBIAN_MIRROR = "https://deb.debian.org/debian/"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Deb:
    """One pinned Debian package file: its path in the pool and its sha256."""

    pool_path: str  # "pool/main/p/python3.11/python3.11-minimal_3.11.2-6+deb12u8_arm64.deb"
    sha256: str

    @property
    def filename(self) -> str:
        return self.pool_path.rsplit("/", 1)[-1]


def _deb(pool_path: str, sha256: str) -> Deb:
    return Deb(pool_path="pool/main/" + pool_path, sha256=sha256)


# qemu-user's static aarch64 emulator, for the x86_64 host.
QEMU = _deb("q/qemu/qemu-user-static_7.2+dfsg-7+deb12u18+b3_amd64.deb",
            "c3e3ba2bd87f8c5b9a5da5ef21b5a3b82d7c63b89dd448d9ddaa4eabc5b6e402")
# python3.11 for arm64 and the libraries its stdlib, torch's wheel (libstdc++, libgomp) and
# pip need; curses, readline, dbm and nis are left out.
DEBS = (
    _deb("p/python3.11/python3.11-minimal_3.11.2-6+deb12u8_arm64.deb",
         "6a07dd571f1a15af2f855d64571766fe44b73a57cc3b5ca79502bc89156a5e12"),
    _deb("p/python3.11/libpython3.11-minimal_3.11.2-6+deb12u8_arm64.deb",
         "c48bac178c0fc43a2bf8ace784c762b5ee83e2b981894a991dc3ccfd3ec7cd4b"),
    _deb("p/python3.11/libpython3.11-stdlib_3.11.2-6+deb12u8_arm64.deb",
         "e79876de55c6c2dca10d044b2fa69ccd863950ea01714220c1982d16008105f9"),
    _deb("g/glibc/libc6_2.36-9+deb12u14_arm64.deb",
         "01f4330719fd4f65580e16ea5a0527f372fca750e8f588d26deaf09f2d3b1cf4"),
    _deb("g/gcc-12/libgcc-s1_12.2.0-14+deb12u1_arm64.deb",
         "576926b283613db80168ddf76380a3bd877602778cf0d226caa7bfbfa71eacf3"),
    _deb("g/gcc-12/libstdc++6_12.2.0-14+deb12u1_arm64.deb",
         "26e138c677a985775331373828a6c286c551ff397cb735d00e2383cb273d1cb2"),
    _deb("g/gcc-12/libgomp1_12.2.0-14+deb12u1_arm64.deb",
         "a48b70dd1a95585466b40bd94564bce56ebcb2566e49ccdb6441e996aaab2098"),
    _deb("z/zlib/zlib1g_1.2.13.dfsg-1_arm64.deb",
         "52b8b8a145bbe1956bba82034f77022cbef0c3d0885c9e32d9817a7932fe1913"),
    _deb("e/expat/libexpat1_2.5.0-1+deb12u2_arm64.deb",
         "8dc1976735acf825e3a922d82f171e20feec7394da2b8c616091983e38706275"),
    _deb("libf/libffi/libffi8_3.4.4-1_arm64.deb",
         "80b5c36177dc0e29d531c7eddbed3cc7355cb490e49f8cfa5959572d161f27b3"),
    _deb("o/openssl/libssl3_3.0.20-1~deb12u2_arm64.deb",
         "a256e03cc3abd7243ac5c6ee91a9deb56478221ef0d3c2b0748551e13140c0bf"),
    _deb("b/bzip2/libbz2-1.0_1.0.8-5+b1_arm64.deb",
         "d3a96ece03326498b39ff093a76800dfcbcb1d4049d6ae6e9f6fa1aa7a590ad6"),
    _deb("x/xz-utils/liblzma5_5.4.1-1+deb12u1_arm64.deb",
         "647ce9d81e41c30071ce6ac0d3324579216a33aaa1d28971d6952315f6a95a75"),
    _deb("s/sqlite3/libsqlite3-0_3.40.1-2+deb12u2_arm64.deb",
         "a690f7f2aa6435bd1fd7cbbd2216acb9acbb8c48c9721f2c195766375439eb13"),
    _deb("u/util-linux/libuuid1_2.38.1-5+deb12u3_arm64.deb",
         "3b2d19df0f3190108cf54228c4cfc822226c06d8f3615a5ab16a7dffb1f58aed"),
    _deb("libx/libxcrypt/libcrypt1_4.4.33-2_arm64.deb",
         "eea0ad76ea5eb507127fea0c291622ea4ecdbb71c4b9a8ed9c76ae33fc1a0127"),
    _deb("m/media-types/media-types_10.0.0_all.deb",
         "aaa46dcb3b39948ae2e0fdb72cfcb2f48c0b59f19785a3da8045c05eb19955dd"),
)
PYTHON = "usr/bin/python3.11"  # in the root
PYTHON_VERSION = "3.11"

# qemu-user 7.2 shows an aarch64 process the host's x86 /proc/cpuinfo (no "CPU implementer"
# or "CPU part"), and torch 2.13.0's aarch64 libtorch_cpu.so (pytorch/cpuinfo, at load)
# segfaults on it: `import torch` dies with SIGSEGV.  qemu's -L prefix serves a path the root
# has before the host's, so the root carries an aarch64 /proc/cpuinfo: one entry per host CPU
# (the count the host's /sys/devices/system/cpu says), each a Cortex-X925 (GB10's big core).
CPUINFO = "proc/cpuinfo"  # in the root
_CPU_FEATURES = ("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma "
                 "lrcpc dcpop sha3 asimddp sha512 asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg dcpodp "
                 "flagm2 frint i8mm bf16 bti")


class EmulatorError(Fp4graphError):
    """The aarch64 interpreter could not be built or does not run."""


def fetch_deb(cache_dir: pathlib.Path, deb: Deb) -> pathlib.Path:
    """The cached, sha256-checked ``deb``; downloaded from FP4GRAPH_DEBIAN_MIRROR (default
    Debian's) when missing."""
    cached = cache_dir / "debian" / deb.filename
    if not cached.exists():
        url = (os.environ.get("FP4GRAPH_DEBIAN_MIRROR") or DEBIAN_MIRROR).rstrip("/") + "/" + deb.pool_path
        with atomic_file(cached) as tmp:
            log(f"fetch {url}")
            try:
                with urllib.request.urlopen(url, timeout=300) as response, tmp.open("wb") as out:
                    shutil.copyfileobj(response, out, 1 << 20)
            except (urllib.error.URLError, OSError) as exc:
                raise FetchError(
                    f"{url}: download failed: {exc}. Debian drops superseded point versions "
                    f"from its pool: update the pin of {deb.filename} in "
                    "src/fp4graph/platforms/emulator.py (see its docstring)") from None
            _check(tmp, deb)
    return _check(cached, deb)


def _check(path: pathlib.Path, deb: Deb) -> pathlib.Path:
    actual = sha256_of(path)
    if actual != deb.sha256:
        raise HashMismatchError(
            f"{path}: sha256 mismatch for {deb.filename}: expected {deb.sha256}, got {actual} "
            "(src/fp4graph/platforms/emulator.py); delete the file to download it again")
    return path


def _unpack(deb: pathlib.Path, into: pathlib.Path) -> None:
    if shutil.which("dpkg-deb") is None:
        raise EmulatorError(f"{deb}: dpkg-deb is needed to unpack it (Debian's dpkg package)")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(into)], check=True)


def _key() -> str:
    """The root's directory name: the pins it was built from."""
    pins = "\n".join(d.sha256 for d in (QEMU, *DEBS))
    return "python3.11-" + hashlib.sha256(pins.encode()).hexdigest()[:12]


def cpuinfo(processors: int) -> str:
    """An aarch64 ``/proc/cpuinfo`` of ``processors`` Cortex-X925 cores, as Linux writes it."""
    return "".join(
        f"processor\t: {n}\nBogoMIPS\t: 2000.00\nFeatures\t: {_CPU_FEATURES}\nCPU implementer\t: 0x41\n"
        "CPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd85\nCPU revision\t: 1\n\n"
        for n in range(processors))


def host_processors() -> int:
    """How many CPUs the host's sysfs says are possible (``0-N``), else ``os.cpu_count()``."""
    try:
        last = pathlib.Path("/sys/devices/system/cpu/possible").read_text().strip().split(",")[-1]
        return int(last.rsplit("-", 1)[-1]) + 1
    except (OSError, ValueError):
        return os.cpu_count() or 1


def _write_cpuinfo(root: pathlib.Path) -> None:
    """The root's aarch64 /proc/cpuinfo for this host, (re)written when it differs."""
    path, text = root / CPUINFO, cpuinfo(host_processors())
    if not path.is_file() or path.read_text() != text:
        with atomic_file(path) as tmp:
            tmp.write_text(text)


def aarch64_home(cache_dir: pathlib.Path) -> pathlib.Path:
    """The built emulator: ``qemu-aarch64-static`` and ``root/`` (Debian's arm64 python3.11,
    an aarch64 /proc/cpuinfo)."""
    home = cache_dir / "aarch64" / _key()
    if (home / "qemu-aarch64-static").exists():
        _write_cpuinfo(home / "root")
        return home
    debs = [fetch_deb(cache_dir, d) for d in DEBS]
    qemu_deb = fetch_deb(cache_dir, QEMU)
    with atomic_directory(home, replace=False) as staging:
        for deb in debs:
            _unpack(deb, staging / "root")
        with tempfile.TemporaryDirectory(dir=staging) as scratch:
            _unpack(qemu_deb, pathlib.Path(scratch))
            shutil.copy2(pathlib.Path(scratch) / "usr/bin/qemu-aarch64-static", staging)
        _write_cpuinfo(staging / "root")
        _probe(staging)
    return home


def _argv(home: pathlib.Path) -> list[str]:
    return [str(home / "qemu-aarch64-static"), "-L", str(home / "root"), str(home / "root" / PYTHON)]


def _probe(home: pathlib.Path) -> None:
    code = "import platform, ssl, ctypes, lzma, bz2, sqlite3; print(platform.machine())"
    result = subprocess.run([*_argv(home), "-c", code], capture_output=True, text=True)
    if result.returncode or result.stdout.strip() != "aarch64":
        raise EmulatorError(f"{home}: the emulated python3.11 does not run: "
                            f"{(result.stdout + result.stderr).strip()[-500:]}")


def aarch64_python(cache_dir: pathlib.Path) -> list[str]:
    """The argv prefix that runs the emulated aarch64 python3.11 (built on first use):
    ``[qemu-aarch64-static, -L, ROOT, ROOT/usr/bin/python3.11]``; append ``-c CODE``,
    ``-m MODULE`` or a script.  Packages come from PYTHONPATH (an install ``--target``)."""
    return _argv(aarch64_home(cache_dir))
