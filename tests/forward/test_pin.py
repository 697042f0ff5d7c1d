"""forward.pin: a release from a (fixture, local) PEP 691 index into patches/stacks.toml.

The fixture releases are tiny sglang / flashinfer-python 9.x wheels and sdists
(tests/harness/releases.py) served on 127.0.0.1; the stacks.toml edited is the repository's own,
whose comments and order must survive.
"""

from __future__ import annotations

import dataclasses
import difflib
import pathlib
from collections.abc import Iterator

import pytest
from packaging.version import Version

from fp4graph import cli
from fp4graph.forward import pin
from fp4graph.model import stacks
from fp4graph.model.config import Settings
from harness.releases import Index, Release, make_release, sha256

COMMIT = "0123456789abcdef0123456789abcdef01234567"
CPS = [f"cp3{n}-cp3{n}-manylinux_2_34_x86_64" for n in (10, 11, 12)]
SGLANG_REQUIRES = [
    "flashinfer_python==9.1.0", "flashinfer_cubin==9.1.0", "torch==2.11.0", "numpy",
    'torchcodec==0.8.0; sys_platform == "darwin"', 'pytest==8.0; extra == "test"',
]


@pytest.fixture
def releases(tmp_path: pathlib.Path) -> list[Release]:
    root = tmp_path / "dist"
    files = {"python/sglang/__init__.py": "", "python/sglang/_version.py": '__version__ = "9.1.0"\n'}
    return [
        make_release(root, "sglang", "9.1.0", files, requires=SGLANG_REQUIRES, tags=CPS, sdist=False),
        make_release(root, "flashinfer-python", "9.1.0", {
            "flashinfer/__init__.py": "",
            "flashinfer/_build_meta.py": f'__version__ = "9.1.0"\n__git_version__ = "{COMMIT}"\n',
        }, requires=["torch", "numpy"]),
    ]


@pytest.fixture
def served(checkout: Settings, releases: list[Release], tmp_path: pathlib.Path) -> Iterator[Settings]:
    index = Index(releases)
    with index.serve() as url:
        yield dataclasses.replace(checkout, index_url=url, cache_dir=tmp_path / "cache")


def _only_insertions(before: str, after: str) -> list[str]:
    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    assert not [d for d in diff if d.startswith("- ")], "pin removed or changed a line"
    return [d[2:] for d in diff if d.startswith("+ ")]


def test_pin_writes_artifacts_and_stack_keeping_the_file(served: Settings, releases: list[Release]) -> None:
    before = served.stacks_file.read_text()
    result = pin.pin(served, "sglang", "9.1.0")
    after = served.stacks_file.read_text()
    added = _only_insertions(before, after)
    assert "# `torch` is the stack's own pin (from sglang's METADATA): the GPU, bench and" in after
    catalog = stacks.load(served.stacks_file)
    sglang = catalog.artifact("sglang", "9.1.0")
    assert [(f.filename, f.sha256) for f in sglang.files] == [(p.name, sha256(p)) for p in releases[0].wheels]
    assert sglang.sdist is None and sglang.revision == 1
    flashinfer = catalog.artifact("flashinfer-python", "9.1.0")
    assert flashinfer.sdist is not None and flashinfer.sdist.sha256 == sha256(releases[1].sdist)
    # the commit the wheel records, for nox -s suites (which checks the tag names it)
    assert flashinfer.source == stacks.SourcePin(repo="flashinfer-ai/flashinfer", tag="v9.1.0", commit=COMMIT)
    assert sglang.source is None
    assert catalog.stack("sglang-9.1.0") == stacks.Stack(
        name="sglang-9.1.0", artifacts=("sglang==9.1.0", "flashinfer-python==9.1.0"), torch="2.11.0")
    assert result.stack == "sglang-9.1.0" and result.torch == "2.11.0"
    # each block beside its project's releases, in version order; stacks before flashinfer's
    # (9.1.0 is newer than every release the repository pins: it goes after the newest)
    old = stacks.parse(stacks.read_text(before))
    newest_stack = max((s.name for s in old.stacks if s.name.startswith("sglang-")),
                       key=lambda n: Version(n.removeprefix("sglang-")))
    names = [s.name for s in catalog.stacks]
    assert names.index("sglang-9.1.0") == names.index(newest_stack) + 1
    newest_flashinfer = max((a for a in old.artifacts.values() if a.project == "flashinfer-python"),
                            key=lambda a: Version(a.version))
    keys = list(catalog.artifacts)
    assert keys.index("flashinfer-python==9.1.0") == keys.index(newest_flashinfer.key) + 1
    assert "# 9.1.0 ships one wheel per CPython: every one we serve is pinned and repacked on its own." in added
    # a second pin changes nothing
    again = pin.pin(served, "sglang", "9.1.0")
    assert served.stacks_file.read_text() == after
    assert again.artifacts == () and again.stack is None
    assert again.existing == ("sglang==9.1.0", "flashinfer-python==9.1.0")


def test_pin_reads_an_html_only_index(checkout: Settings, releases: list[Release], tmp_path: pathlib.Path) -> None:
    with Index(releases, json_pages=False).serve() as url:
        settings = dataclasses.replace(checkout, index_url=url, cache_dir=tmp_path / "cache")
        pin.pin(settings, "flashinfer-python", "9.1.0")
    catalog = stacks.load(settings.stacks_file)
    assert catalog.artifact("flashinfer-python", "9.1.0").files[0].sha256 == sha256(releases[1].wheel)
    assert catalog.stack("flashinfer-9.1.0").torch is None  # flashinfer pins no torch


def test_a_pin_that_differs_from_the_index_is_refused(served: Settings, releases: list[Release]) -> None:
    pin.pin(served, "flashinfer-python", "9.1.0", stack=False)
    text = served.stacks_file.read_text().replace(sha256(releases[1].wheel), "0" * 64)
    served.stacks_file.write_text(text)
    with pytest.raises(pin.PinError, match=r"flashinfer-python==9.1.0 is already pinned with other "
                       r"files or hashes .*nothing written"):
        pin.pin(served, "sglang", "9.1.0")
    assert served.stacks_file.read_text() == text


def test_a_missing_cpython_wheel_is_named(checkout: Settings, tmp_path: pathlib.Path) -> None:
    release = make_release(tmp_path / "dist", "sglang", "9.2.0", {"python/sglang/__init__.py": ""},
                           tags=CPS[:2], sdist=False)
    with Index([release]).serve() as url:
        settings = dataclasses.replace(checkout, index_url=url, cache_dir=tmp_path / "cache")
        with pytest.raises(pin.PinError, match=r"sglang 9.2.0 has no pure wheel and no cp312 x86_64 Linux wheel"):
            pin.pin(settings, "sglang", "9.2.0")


def test_a_measure_only_pin_needs_one_x86_64_cpython(checkout: Settings, tmp_path: pathlib.Path) -> None:
    """sglang 0.5.22+ publish no cp310: a stack is refused, a measure-only pin (``--no-stack``)
    takes the cp311 wheel; with no cp311/cp312 x86_64 wheel it is refused too."""
    release = make_release(tmp_path / "dist", "sglang", "9.4.0", {"python/sglang/__init__.py": ""},
                           tags=CPS[1:], sdist=False)
    only_cp313 = make_release(tmp_path / "dist", "sglang", "9.5.0", {"python/sglang/__init__.py": ""},
                              tags=["cp313-cp313-manylinux_2_34_x86_64"], sdist=False)
    with Index([release, only_cp313]).serve() as url:
        settings = dataclasses.replace(checkout, index_url=url, cache_dir=tmp_path / "cache")
        with pytest.raises(pin.PinError, match=r"sglang 9.4.0 has no pure wheel and no cp310 x86_64 Linux wheel"):
            pin.pin(settings, "sglang", "9.4.0")
        pin.pin(settings, "sglang", "9.4.0", stack=False)
        with pytest.raises(pin.PinError, match=r"sglang 9.5.0 has no pure wheel and no cp311 or cp312 x86_64"):
            pin.pin(settings, "sglang", "9.5.0", stack=False)
    files = stacks.load(settings.stacks_file).artifact("sglang", "9.4.0").files
    assert [f.filename.split("-", 2)[2] for f in files] == [f"{t}.whl" for t in CPS[1:]]


def test_a_measure_only_pin_takes_a_dependency_the_index_has_as_an_sdist_only(
        checkout: Settings, tmp_path: pathlib.Path) -> None:
    """sglang 0.5.4 pins flashinfer-python 0.4.1, an sdist only on PyPI: a stack is refused, a
    measure-only pin records the sdist (``files = []``) and the commit its _build_meta.py
    records; a release whose own files are an sdist only is refused (no METADATA to read)."""
    dist = tmp_path / "dist"
    sglang = make_release(dist, "sglang", "9.6.0", {"python/sglang/__init__.py": ""},
                          requires=["flashinfer_python==9.6.0"], sdist=False)
    build_meta = f'__version__ = "9.6.0"\n__git_version__ = "{COMMIT}"\n'
    flashinfer = make_release(dist, "flashinfer-python", "9.6.0", {"flashinfer/_build_meta.py": build_meta},
                              tags=())
    assert flashinfer.wheels == () and flashinfer.sdist is not None
    with Index([sglang, flashinfer]).serve() as url:
        settings = dataclasses.replace(checkout, index_url=url, cache_dir=tmp_path / "cache")
        with pytest.raises(pin.PinError, match=r"flashinfer-python 9.6.0 has no pure wheel and no cp310 x86_64 "
                           r"Linux wheel; its wheels: none"):
            pin.pin(settings, "sglang", "9.6.0")
        pin.pin(settings, "sglang", "9.6.0", stack=False)
        with pytest.raises(pin.PinError, match=r"flashinfer-python 9.6.0 has only an sdist: its wheel METADATA"):
            pin.pin(settings, "flashinfer-python", "9.6.0", stack=False)
    fi = stacks.load(settings.stacks_file).artifact("flashinfer-python", "9.6.0")
    assert fi.sdist_only and fi.sdist == stacks.ArtifactFile(filename=flashinfer.sdist.name,
                                                             sha256=sha256(flashinfer.sdist))
    assert fi.source == stacks.SourcePin(repo="flashinfer-ai/flashinfer", tag="v9.6.0", commit=COMMIT)
    assert "sglang-9.6.0" not in {s.name for s in stacks.load(settings.stacks_file).stacks}


def test_aarch64_and_cp313_wheels_are_pinned_after_the_x86_64_ones(checkout: Settings, tmp_path: pathlib.Path) -> None:
    """A DGX Spark is linux aarch64: every linux wheel of a served CPython is pinned, x86_64 first."""
    tags = [*CPS, "cp313-cp313-manylinux_2_34_x86_64", "cp311-cp311-manylinux_2_34_aarch64",
            "cp311-cp311-macosx_11_0_arm64"]
    release = make_release(tmp_path / "dist", "sglang", "9.3.0", {"python/sglang/__init__.py": ""},
                           tags=tags, sdist=False)
    with Index([release]).serve() as url:
        settings = dataclasses.replace(checkout, index_url=url, cache_dir=tmp_path / "cache")
        pin.pin(settings, "sglang", "9.3.0", stack=False)
    files = stacks.load(settings.stacks_file).artifact("sglang", "9.3.0").files
    assert [f.filename.split("-", 2)[2] for f in files] == [f"{t}.whl" for t in tags[:5]]


def test_a_yanked_release_is_refused(checkout: Settings, releases: list[Release], tmp_path: pathlib.Path) -> None:
    with Index(releases, yanked={releases[1].wheel.name: "broken build"}).serve() as url:
        settings = dataclasses.replace(checkout, index_url=url, cache_dir=tmp_path / "cache")
        with pytest.raises(pin.PinError, match=r"flashinfer_python-9.1.0-py3-none-any.whl is yanked \(broken build\)"):
            pin.pin(settings, "flashinfer-python", "9.1.0")


def test_an_unknown_version_is_named(served: Settings) -> None:
    with pytest.raises(pin.PinError, match=r"/simple/sglang/: sglang has no files for version '9.9.9'"):
        pin.pin(served, "sglang", "9.9.9")


def test_exact_pins_evaluate_markers_and_ignore_extras() -> None:
    metadata = "Metadata-Version: 2.1\nName: sglang\n" + "".join(f"Requires-Dist: {r}\n" for r in SGLANG_REQUIRES)
    assert pin.exact_pins(metadata, "x") == {
        "flashinfer-python": "9.1.0", "flashinfer-cubin": "9.1.0", "torch": "2.11.0",
    }


def test_the_cli_prints_what_it_pinned(served: Settings, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(served.repo)
    monkeypatch.setenv("FP4GRAPH_CACHE", str(served.cache_dir))
    assert cli.main(["pin", "sglang", "9.1.0", "--index-url", served.index_url]) == 0
    out = capsys.readouterr().out
    assert "pinned sglang==9.1.0: sglang-9.1.0-cp310-cp310-manylinux_2_34_x86_64.whl, " in out
    assert "pinned flashinfer-python==9.1.0: flashinfer_python-9.1.0-py3-none-any.whl, " \
           "flashinfer_python-9.1.0.tar.gz" in out
    assert "stack sglang-9.1.0 (torch 2.11.0)" in out
    # The new stack goes after the other sglang stacks, before the flashinfer-only ones.
    names = [s["name"] for s in stacks.read(served.stacks_file)["stack"]]
    with_sglang = [n for n in names if n.startswith("sglang-")]
    assert names[:len(with_sglang)] == with_sglang and with_sglang[-1] == "sglang-9.1.0", names
