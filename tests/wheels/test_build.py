from __future__ import annotations

import email.parser
import json
import pathlib
import zipfile

import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from wheel.wheelfile import WheelFile

from fp4graph import cli
from fp4graph.model import manifest, projects
from fp4graph.model.config import Settings
from fp4graph.model.errors import ConfigError
from fp4graph.wheels import build, repack

from .conftest import STACK, make_checkout, snapshot

# The fixture catalog (fixtures/patches/stacks.toml) pins both artifacts at revision 1.
FI = "flashinfer_python-0.6.3+fp4graph.1-py3-none-any.whl"
SG = "sglang-0.5.9+fp4graph.1-py3-none-any.whl"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_cache: pathlib.Path) -> Settings:
    settings = make_checkout(tmp_path_factory.mktemp("built") / "repo", shared_cache)
    build.build(settings, [STACK])
    return settings


def members(wheel: pathlib.Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def metadata(data: bytes) -> dict[str, list[str]]:
    message = email.parser.BytesParser().parsebytes(data)
    fields: dict[str, list[str]] = {}
    for key, value in message.items():
        fields.setdefault(key, []).append(str(value))
    return fields


def test_wheels_dir_layout(built: Settings) -> None:
    out = built.wheels_dir
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [FI, SG, f"{FI}.metadata", f"{SG}.metadata", "README.md", "SHA256SUMS", "manifest.json", "simple"]
    )
    sums = (out / "SHA256SUMS").read_text().splitlines()
    assert [line.split("  ")[1] for line in sums] == [FI, SG]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stacks"][0]["pins"] == ["sglang==0.5.9+fp4graph.1", "flashinfer-python==0.6.3+fp4graph.1"]
    fi = manifest["artifacts"]["flashinfer-python==0.6.3"]
    assert fi["upstream_files"][0]["sha256"] == "0fe2de934a4b3690c543dafb03f38d7bb4a762431abe8ae4f7292d6fef10c65d"
    assert [p["name"] for p in fi["series"]["patches"]] == ["0001-add-fixture-marker.patch"]
    assert len(fi["series"]["sha256"]) == 64
    assert manifest["format"] == 1


def test_pins_of_the_built_stack(built: Settings, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``pins STACK`` prints what pip installs; ``--json`` spells each pin out (what the
    nox sessions read)."""
    monkeypatch.chdir(built.repo)
    assert cli.main(["pins", STACK, "--torch"]) == 0
    assert capsys.readouterr().out.split() == [
        "sglang==0.5.9+fp4graph.1", "flashinfer-python==0.6.3+fp4graph.1", "torch==2.9.1",
    ]
    assert cli.main(["pins", STACK, "--project", "flashinfer-python", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"stack": STACK, "pins": [{
        "project": "flashinfer-python", "version": "0.6.3+fp4graph.1", "requirement": "flashinfer-python==0.6.3+fp4graph.1",
        "upstream_version": "0.6.3", "revision": 1,
    }]}
    assert cli.main(["pins", "sglang-0.5.11"]) == 2
    assert capsys.readouterr().err == (
        f"ManifestError: {built.wheels_dir / 'manifest.json'}: stack 'sglang-0.5.11' was not built; "
        "built: sglang-0.5.9; build it with `nox -s wheels -- --stack sglang-0.5.11`\n"
    )


def test_index_pages_point_at_files_with_hashes(built: Settings) -> None:
    out = built.wheels_dir
    page = (out / "simple" / "flashinfer-python" / "index.html").read_text()
    sha = next(line.split()[0] for line in (out / "SHA256SUMS").read_text().splitlines() if FI in line)
    assert f'href="../../flashinfer_python-0.6.3%2Bfp4graph.1-py3-none-any.whl#sha256={sha}"' in page
    assert 'data-core-metadata="sha256=' in page
    assert (out / f"{FI}.metadata").read_bytes() == members(out / FI)[
        "flashinfer_python-0.6.3+fp4graph.1.dist-info/METADATA"
    ]
    assert '<a href="sglang/">sglang</a>' in (out / "simple" / "index.html").read_text()


def test_record_is_valid(built: Settings) -> None:
    for name in (FI, SG):
        with WheelFile(built.wheels_dir / name) as wf:  # checks every file against RECORD
            for info in wf.infolist():
                wf.read(info)


@pytest.mark.parametrize(
    ("patched", "upstream", "project", "changed"),
    [
        (FI, "flashinfer_python-0.6.3-py3-none-any.whl", "flashinfer-python", ["flashinfer/__init__.py"]),
        (SG, "sglang-0.5.9-py3-none-any.whl", "sglang", ["sglang/global_config.py"]),
    ],
)
def test_patched_wheel_differs_from_upstream_only_where_it_should(
    built: Settings, patched: str, upstream: str, project: str, changed: list[str]
) -> None:
    ours = members(built.wheels_dir / patched)
    theirs = members(built.cache_dir / "artifacts" / upstream)
    old_info, new_info = (
        next(n.split("/")[0] for n in files if n.endswith(".dist-info/METADATA")) for files in (theirs, ours)
    )
    renamed = {n.replace(old_info, new_info, 1): data for n, data in theirs.items()}
    assert set(ours) == set(renamed)
    differing = sorted(n for n in ours if ours[n] != renamed[n])
    version_file = projects.get(project).version_file
    assert differing == sorted([*changed, version_file, f"{new_info}/METADATA", f"{new_info}/RECORD"])
    # METADATA: only the Version field changed, in place.
    old_meta, new_meta = metadata(renamed[f"{new_info}/METADATA"]), metadata(ours[f"{new_info}/METADATA"])
    assert new_meta.pop("Version") == [old_meta.pop("Version")[0] + "+fp4graph.1"]
    assert new_meta == old_meta
    # The runtime version says what METADATA says.
    assert b'"' + new_meta_version(ours, new_info).encode() + b'"' in ours[version_file]


def new_meta_version(files: dict[str, bytes], info: str) -> str:
    return metadata(files[f"{info}/METADATA"])["Version"][0]


def test_sglang_exact_flashinfer_pin_is_satisfied(built: Settings) -> None:
    meta = metadata(members(built.wheels_dir / SG)["sglang-0.5.9+fp4graph.1.dist-info/METADATA"])
    pin = next(Requirement(r) for r in meta["Requires-Dist"] if r.startswith("flashinfer_python"))
    assert str(pin.specifier) == "==0.6.3"
    assert pin.specifier.contains(Version("0.6.3+fp4graph.1"))


def test_two_builds_are_byte_identical(built: Settings, tmp_path: pathlib.Path, shared_cache: pathlib.Path) -> None:
    again = make_checkout(tmp_path / "again", shared_cache)
    build.build(again, [STACK])
    assert snapshot(again.wheels_dir) == snapshot(built.wheels_dir)


def test_rebuild_in_place_is_identical(built: Settings) -> None:
    before = snapshot(built.wheels_dir)
    build.build(built, [STACK])
    assert snapshot(built.wheels_dir) == before


def test_interrupted_build_leaves_wheels_as_they_were(
    own_build_cache: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = own_build_cache  # both wheels are really rebuilt
    build.build(checkout, [STACK])
    before = snapshot(checkout.wheels_dir)
    real_pack = repack.pack
    calls = []

    def pack_then_interrupt(*args: object, **kwargs: object) -> pathlib.Path:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_pack(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(build, "pack", pack_then_interrupt)
    # Changed series change the wheels (and miss the build cache); the interrupted
    # build must not show.
    for patch in checkout.patches_dir.glob("*/*/0001-add-fixture-marker.patch"):
        patch.write_text(patch.read_text().replace("Last-Update: 2026-11-29", "Last-Update: 2026-11-30"))
    with pytest.raises(KeyboardInterrupt):
        build.build(checkout, [STACK])
    assert snapshot(checkout.wheels_dir) == before
    assert sorted(p.name for p in checkout.repo.iterdir()) == ["patches", "wheels"]


def test_swap_cut_between_renames_is_recovered(built: Settings, tmp_path: pathlib.Path) -> None:
    wheels = built.wheels_dir
    before = snapshot(wheels)
    wheels.rename(wheels.with_name(".wheels.old"))  # as if killed between the renames
    build.recover(wheels)
    assert snapshot(wheels) == before


def test_artifact_without_series_is_listed_unpatched(checkout: Settings) -> None:
    (checkout.patches_dir / "sglang" / "0.5.9" / "series").unlink()
    built = build.build(checkout, [STACK])
    assert [p.requirement for p in built.stack(STACK).pins] == ["sglang==0.5.9", "flashinfer-python==0.6.3+fp4graph.1"]
    assert [p.revision for p in built.stack(STACK).pins] == [None, 1]
    assert manifest.read_built(checkout.wheels_dir) == built
    assert [p.name for p in checkout.wheels_dir.glob("*.whl")] == [FI]



def test_reports_survive_a_rebuild(built: Settings) -> None:
    report = built.wheels_dir / "reports" / "drift.json"
    report.parent.mkdir()
    report.write_text("[]\n")
    build.build(built, [STACK])
    assert report.read_text() == "[]\n"


def test_build_cache_reuses_identical_bytes_and_rejects_tampering(
    own_build_cache: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = own_build_cache  # this test tampers with the build cache
    build.build(checkout, [STACK])
    first = snapshot(checkout.wheels_dir)

    def no_pack(*args: object, **kwargs: object) -> pathlib.Path:
        raise AssertionError("a cached wheel was rebuilt")

    monkeypatch.setattr(build, "pack", no_pack)
    build.build(checkout, [STACK])
    assert snapshot(checkout.wheels_dir) == first

    # A cached wheel that no longer matches its recorded hash is rebuilt, not served.
    cached = next((checkout.cache_dir / "built").glob(f"*/{FI}"))
    cached.write_bytes(b"tampered")
    monkeypatch.undo()
    build.build(checkout, [STACK])
    assert snapshot(checkout.wheels_dir) == first


def test_a_stacks_lock_is_published_beside_the_index(tmp_path: pathlib.Path, shared_cache: pathlib.Path) -> None:
    """patches/locks/<stack>.txt goes to wheels/locks/, with its sha256 in SHA256SUMS and in
    the manifest's stack entry; a broken lock stops the build naming its file and line."""
    checkout = make_checkout(tmp_path / "repo", shared_cache)
    lock = checkout.patches_dir / "locks" / f"{STACK}.txt"
    lock.parent.mkdir()
    lock.write_text("# fixture lock\nsix==1.17.0\n")
    build.build(checkout, [STACK])
    published = checkout.wheels_dir / "locks" / f"{STACK}.txt"
    assert published.read_text() == lock.read_text()
    digest = build.sha256_of(published)
    assert f"{digest}  locks/{STACK}.txt" in (checkout.wheels_dir / "SHA256SUMS").read_text().splitlines()
    stack = manifest.read_built(checkout.wheels_dir).stack(STACK)
    assert stack.lock == manifest.PublishedLock(path=f"locks/{STACK}.txt", sha256=digest)
    # Beside it, what one install command needs with only the index URL: the pins, and on
    # linux aarch64 the pins (no CUDA torch build here) and the (empty) overrides.
    pins = [p.requirement for p in stack.pins]
    for path in (f"locks/{STACK}.pins.txt", f"locks/{STACK}.linux-aarch64.pins.txt"):
        assert (checkout.wheels_dir / path).read_text().splitlines()[1:] == pins
        assert f"{build.sha256_of(checkout.wheels_dir / path)}  {path}" in (
            checkout.wheels_dir / "SHA256SUMS").read_text().splitlines()
    assert (checkout.wheels_dir / f"locks/{STACK}.linux-aarch64.overrides.txt").read_text().splitlines()[1:] == []
    lock.write_text("six>=1\n")
    with pytest.raises(ConfigError, match=rf"{STACK}\.txt:1: 'six>=1' is not an exact pin"):
        build.build(checkout, [STACK])
    assert published.read_text() == "# fixture lock\nsix==1.17.0\n"  # wheels/ as it was


def test_a_platforms_torch_build_and_overrides_are_published(tmp_path: pathlib.Path, shared_cache: pathlib.Path) -> None:
    """patches/locks/platforms.toml: linux aarch64's pins add the CUDA torch build and the
    other builds from their own index (sgl-kernel's), its
    overrides file holds the override; linux x86_64's pins stay the stack's own."""
    checkout = make_checkout(tmp_path / "repo", shared_cache)
    locks_dir = checkout.patches_dir / "locks"
    locks_dir.mkdir()
    (locks_dir / f"{STACK}.txt").write_text("# fixture lock\nsix==1.17.0\n")
    (locks_dir / "platforms.toml").write_text(f"""
[[override]]
platform = "linux-aarch64"
stacks = ["{STACK}"]
requirement = "torch-memory-saver==0.0.9.post1"
why = "no aarch64 wheel"

[[torch]]
platform = "linux-aarch64"
stacks = ["{STACK}"]
requirement = "torch==2.9.1+cu130"
index = "https://download.pytorch.org/whl/cu130"
why = "PyPI's is a CPU build"

[[build]]
platform = "linux-aarch64"
stacks = ["{STACK}"]
requirement = "sgl-kernel==0.3.21+cu130"
index = "https://docs.sglang.ai/whl/cu130/"
why = "PyPI's is a CUDA 12 build"
""")
    build.build(checkout, [STACK])
    published = checkout.wheels_dir / "locks"
    pins = [p.requirement for p in manifest.read_built(checkout.wheels_dir).stack(STACK).pins]
    assert (published / f"{STACK}.pins.txt").read_text().splitlines()[1:] == pins
    assert (published / f"{STACK}.linux-aarch64.pins.txt").read_text().splitlines()[1:] == [
        *pins, "torch==2.9.1+cu130", "sgl-kernel==0.3.21+cu130"]
    assert (published / f"{STACK}.linux-aarch64.overrides.txt").read_text().splitlines()[1:] == [
        "torch-memory-saver==0.0.9.post1"]
