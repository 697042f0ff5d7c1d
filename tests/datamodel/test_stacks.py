from __future__ import annotations

import pathlib
import re

import pytest

from fp4graph.model import stacks
from fp4graph.model.errors import ConfigError
from harness.checkout import REPO

WHEEL = "flashinfer_python-0.6.3-py3-none-any.whl"
SHA = "0fe2de934a4b3690c543dafb03f38d7bb4a762431abe8ae4f7292d6fef10c65d"
CUBIN = "flashinfer_cubin-0.6.3-py3-none-any.whl"
CUBIN_SHA = "64ecd1e3084c78bfc958e90132d5dffcaf9d2cb4d52bfecde4c1b040e5b024d6"


def artifact(**overrides: object) -> dict[str, object]:
    raw: dict[str, object] = {
        "project": "flashinfer-python",
        "version": "0.6.3",
        "revision": 1,
        "files": [{"filename": WHEEL, "sha256": SHA}],
    }
    raw.update(overrides)
    return raw


def test_repository_stacks_parse() -> None:
    """The repository's catalog, checked against a plain TOML reading of the same file, so a
    new stack or a revision bump needs no change here."""
    path = REPO / "patches" / "stacks.toml"
    raw = stacks.read(path)
    catalog = stacks.load(path)
    names = [s.name for s in catalog.stacks]
    assert names == [s["name"] for s in raw["stack"]] and len(set(names)) == len(names)
    assert [a.key for a in catalog.artifacts.values()] == [
        f"{a['project']}=={a['version']}" for a in raw["artifact"]
    ]
    for entry in raw["artifact"]:
        artifact = catalog.artifact(entry["project"], entry["version"])
        assert artifact.patched_version == f"{entry['version']}+fp4graph.{entry['revision']}"
        assert [f.filename for f in artifact.files] == [f["filename"] for f in entry["files"]]
    # A stack is named after the release it serves: sglang-X holds sglang==X, flashinfer-X
    # flashinfer-python==X.
    for stack in catalog.stacks:
        project, version = stack.name.rsplit("-", 1)
        assert {"sglang": "sglang", "flashinfer": "flashinfer-python"}[project] + "==" + version in (
            stack.artifacts
        ), stack
    for entry in raw["artifact"]:
        artifact = catalog.artifact(entry["project"], entry["version"])
        assert [f.filename for f in artifact.companions] == [
            f["filename"] for f in entry.get("companions", [])
        ]
    # sglang >= 0.5.11 ships one wheel per CPython and machine: each is pinned on its own,
    # linux x86_64 first (the default file), then linux aarch64 (DGX Spark).
    sg = catalog.artifact("sglang", "0.5.11")
    assert [f.filename.split("-")[2] + "-" + f.filename.rsplit("_", 1)[-1] for f in sg.files] == [
        f"cp31{n}-{machine}.whl" for machine in ("64", "aarch64") for n in range(4)]


def test_stacks_by_torch_groups_the_stacks_by_their_torch_pin() -> None:
    """nox -s tracing: which stacks each torch pin traces (a stack without a torch pin traces
    under none)."""
    def wheel(project: str, version: str) -> dict[str, object]:
        name = f"{project.replace('-', '_')}-{version}-py3-none-any.whl"
        return artifact(project=project, version=version, files=[{"filename": name, "sha256": SHA}])

    data = {
        "artifact": [artifact(), wheel("sglang", "0.5.9"), wheel("flashinfer-python", "0.6.8"),
                     wheel("flashinfer-python", "0.7.4")],
        "stack": [
            {"name": "sglang-0.5.9", "artifacts": ["sglang==0.5.9", "flashinfer-python==0.6.3"],
             "torch": "2.9.1"},
            {"name": "flashinfer-0.6.8", "artifacts": ["flashinfer-python==0.6.8"], "torch": "2.11.0"},
            {"name": "flashinfer-0.7.4", "artifacts": ["flashinfer-python==0.7.4"]},
        ],
    }
    catalog = stacks.parse(data)
    assert catalog.artifact("flashinfer-python", "0.6.3").patched_version == "0.6.3+fp4graph.1"
    assert catalog.stacks_by_torch() == {"2.9.1": ["sglang-0.5.9"], "2.11.0": ["flashinfer-0.6.8"]}


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        pytest.param(
            artifact(files=[{"filename": WHEEL, "sha256": "abc"}]),
            "sha256 must be 64 hex digits",
            id="short-hash",
        ),
        pytest.param(
            artifact(files=[{"filename": "flashinfer_python-0.6.4-py3-none-any.whl", "sha256": SHA}]),
            "is not a file of flashinfer-python 0.6.3",
            id="file-of-other-version",
        ),
        pytest.param(artifact(version="0.6.3+local"), "without a local label", id="local-version-pin"),
        pytest.param(artifact(revision=0), "revision must be >= 1", id="revision-zero"),
        pytest.param(artifact(files=[]), "must list the wheels", id="no-files"),
        pytest.param(artifact(files=[], sdist={"filename": WHEEL, "sha256": SHA}), "sdist .* is a wheel",
                     id="sdist-a-wheel"),
        pytest.param(
            artifact(companions=[{"filename": "flashinfer_cubin-0.6.3.tar.gz", "sha256": CUBIN_SHA}]),
            "companion 'flashinfer_cubin-0.6.3.tar.gz' is not a wheel",
            id="companion-sdist",
        ),
        pytest.param(
            artifact(companions=[{"filename": WHEEL, "sha256": SHA}]),
            "pin one wheel per other project",
            id="companion-of-itself",
        ),
        pytest.param(
            artifact(companions=[{"filename": CUBIN, "sha256": CUBIN_SHA}] * 2),
            "pin one wheel per other project",
            id="companion-twice",
        ),
        pytest.param(
            artifact(companions=[{"filename": CUBIN, "sha256": "0" * 63}]),
            "sha256 must be 64 hex digits",
            id="companion-short-hash",
        ),
        pytest.param(
            artifact(companions={"filename": CUBIN, "sha256": CUBIN_SHA}),
            "companions must be a list",
            id="companions-not-a-list",
        ),
    ],
)
def test_bad_artifact_is_rejected(raw: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        stacks.parse({"artifact": [raw]})


def test_stack_must_name_pinned_artifacts() -> None:
    data = {"artifact": [artifact()], "stack": [{"name": "s", "artifacts": ["sglang==0.5.9"]}]}
    with pytest.raises(ConfigError, match="'sglang==0.5.9' is not a pinned artifact"):
        stacks.parse(data)


SDIST = {"filename": "flashinfer_python-0.4.1.tar.gz", "sha256": SHA}


def test_a_release_without_a_wheel_pins_its_sdist_and_no_stack_may_hold_it() -> None:
    """flashinfer-python 0.4.1 (sglang 0.5.4's pin) is an sdist on PyPI: measured pristine
    from the wheel built from it, never patched or served."""
    raw = artifact(version="0.4.1", files=[], sdist=SDIST)
    fi = stacks.parse({"artifact": [raw]}).artifact("flashinfer-python", "0.4.1")
    assert fi.sdist_only and fi.files == () and fi.sdist == stacks.ArtifactFile(**SDIST)
    assert not stacks.parse({"artifact": [artifact()]}).artifact("flashinfer-python", "0.6.3").sdist_only
    with pytest.raises(ConfigError, match=r"flashinfer-python==0.4.1 pins no wheel \(sdist only: "
                       r"flashinfer_python-0.4.1.tar.gz\)"):
        fi.file()
    data = {"artifact": [raw], "stack": [{"name": "flashinfer-0.4.1", "artifacts": ["flashinfer-python==0.4.1"]}]}
    with pytest.raises(ConfigError, match=r"\(flashinfer-0.4.1\): 'flashinfer-python==0.4.1' pins only an sdist"):
        stacks.parse(data)


def test_unknown_artifact_lookup_lists_pins() -> None:
    catalog = stacks.parse({"artifact": [artifact()]})
    with pytest.raises(ConfigError, match=r"flashinfer-python 9.9 is not pinned.*flashinfer-python==0.6.3"):
        catalog.artifact("flashinfer-python", "9.9")


def test_companions_are_pinned_beside_the_artifact_and_never_built() -> None:
    """A companion (flashinfer-cubin beside flashinfer-python) is found by its project name,
    any spelling; it is not one of the artifact's files, so nothing patches or builds it."""
    raw = artifact(companions=[{"filename": CUBIN, "sha256": CUBIN_SHA.upper()}])
    fi = stacks.parse({"artifact": [raw]}).artifact("flashinfer-python", "0.6.3")
    pinned = stacks.ArtifactFile(filename=CUBIN, sha256=CUBIN_SHA)
    assert fi.companions == (pinned,) and pinned.project == "flashinfer-cubin"
    assert fi.companion("flashinfer_cubin") == fi.companion("Flashinfer-Cubin") == pinned
    assert fi.companion("flashinfer-jit-cache") is None
    assert [f.filename for f in fi.files] == [WHEEL]
    assert stacks.parse({"artifact": [artifact()]}).artifact("flashinfer-python", "0.6.3").companions == ()


# What may parse TOML, and the one file each reads: stacks.toml has one reader.
TOML_READERS = {
    "src/fp4graph/model/stacks.py": "patches/stacks.toml",
    "src/fp4graph/model/locks.py": "patches/locks/holds.toml",
    "src/fp4graph/platforms/overrides.py": "patches/locks/platforms.toml",
}
_TOML_IMPORT = re.compile(r"^\s*(?:import|from)\s+(?:tomllib|tomli|toml)\b", re.MULTILINE)


def _sources() -> list[pathlib.Path]:
    """Our code and scripts: src/, tests/, benchmarks/, the noxfile, .ci/ and pipelines/."""
    files = [REPO / "noxfile.py", *(p for p in (REPO / ".ci").iterdir() if p.is_file())]
    for top in ("src", "tests", "benchmarks", "pipelines"):
        files += [p for p in (REPO / top).rglob("*") if p.is_file() and p.suffix in ("", ".py", ".sh", ".yml", ".yaml")]
    return files


def test_one_module_reads_stacks_toml() -> None:
    """Only model/stacks.py parses the catalog (``stacks.read``/``load``); everything else,
    CI scripts too, asks it, so a new table or rule lands in one place."""
    readers = {str(p.relative_to(REPO)) for p in _sources()
               if _TOML_IMPORT.search(p.read_text(encoding="utf-8", errors="replace"))}
    assert readers == set(TOML_READERS), (
        f"TOML is parsed in {sorted(readers - set(TOML_READERS))}: read patches/stacks.toml with "
        "fp4graph.model.stacks (read, load), or add the file and what it reads to TOML_READERS"
    )
    assert "read_holds" in (REPO / "src/fp4graph/model/locks.py").read_text(encoding="utf-8")


def test_the_sglang_stacks_are_those_that_pin_sglang() -> None:
    sglang = {"project": "sglang", "version": "0.5.9", "revision": 1,
              "files": [{"filename": "sglang-0.5.9-py3-none-any.whl", "sha256": SHA}]}
    catalog = stacks.parse({"artifact": [artifact(), sglang], "stack": [
        {"name": "flashinfer-0.6.3", "artifacts": ["flashinfer-python==0.6.3"]},
        {"name": "sglang-0.5.9", "artifacts": ["sglang==0.5.9", "flashinfer-python==0.6.3"]},
    ]})
    (only,) = catalog.sglang_stacks()
    assert only.name == "sglang-0.5.9"
    assert catalog.versions(only) == {"sglang": "0.5.9", "flashinfer-python": "0.6.3"}


def test_the_default_stack_is_an_sglang_stack_of_the_repository() -> None:
    catalog = stacks.load(REPO / "patches" / "stacks.toml")
    assert stacks.DEFAULT_STACK in [s.name for s in catalog.sglang_stacks()]


def _served_catalog(**flashinfer_stack: object) -> stacks.Catalog:
    """flashinfer 0.6.3 as a flashinfer-only stack (``flashinfer_stack`` overrides its
    table) beside an sglang-0.5.9 stack."""
    sglang = {"project": "sglang", "version": "0.5.9", "revision": 1,
              "files": [{"filename": "sglang-0.5.9-py3-none-any.whl", "sha256": SHA}]}
    return stacks.parse({"artifact": [artifact(), sglang], "stack": [
        {"name": "sglang-0.5.9", "artifacts": ["sglang==0.5.9", "flashinfer-python==0.6.3"]},
        {"name": "flashinfer-0.6.3", "artifacts": ["flashinfer-python==0.6.3"], **flashinfer_stack},
    ]})


def test_a_flashinfer_only_stack_says_which_sglang_releases_it_serves() -> None:
    catalog = _served_catalog(serves=["0.5.13", "0.5.13.post1", "0.5.14"])
    fi = catalog.stack("flashinfer-0.6.3")
    assert fi.serves == ("0.5.13", "0.5.13.post1", "0.5.14")
    assert catalog.stack("sglang-0.5.9").serves == ()
    assert catalog.served_named("sglang-0.5.13.post1") == (fi, "0.5.13.post1")
    assert catalog.served_named("sglang-0.5.15") is None
    assert catalog.served_named("sglang-0.5.9") is None


@pytest.mark.parametrize(
    ("serves", "match"),
    [
        pytest.param("0.5.16", r"serves must be a list of sglang releases", id="not-a-list"),
        pytest.param(["0.5.16", "0.5.13"], r"once each, oldest first", id="unsorted"),
        pytest.param(["0.5.16", "0.5.16"], r"once each, oldest first", id="twice"),
        pytest.param(["0.5.16+local"], r"once each, oldest first", id="local-label"),
        pytest.param(["next"], r"serves: Invalid version", id="not-a-version"),
        pytest.param(["0.5.9"], r"stack flashinfer-0\.6\.3 serves sglang 0\.5\.9, which sglang-0\.5\.9 already serves",
                     id="an-sglang-stack-ships-it"),
    ],
)
def test_bad_serves_is_rejected(serves: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _served_catalog(serves=serves)


def test_an_sglang_stack_serves_nothing_else() -> None:
    sglang = {"project": "sglang", "version": "0.5.9", "revision": 1,
              "files": [{"filename": "sglang-0.5.9-py3-none-any.whl", "sha256": SHA}]}
    with pytest.raises(ConfigError, match=r"\(sglang-0\.5\.9\): serves is for flashinfer-only stacks"):
        stacks.parse({"artifact": [artifact(), sglang], "stack": [
            {"name": "sglang-0.5.9", "artifacts": ["sglang==0.5.9", "flashinfer-python==0.6.3"],
             "serves": ["0.5.10"]}]})


def test_two_stacks_never_serve_one_release() -> None:
    other = artifact(version="0.6.4", files=[{"filename": "flashinfer_python-0.6.4-py3-none-any.whl", "sha256": SHA}])
    with pytest.raises(ConfigError, match=r"stack flashinfer-0\.6\.4 serves sglang 0\.5\.16, which flashinfer-0\.6\.3"):
        stacks.parse({"artifact": [artifact(), other], "stack": [
            {"name": "flashinfer-0.6.3", "artifacts": ["flashinfer-python==0.6.3"], "serves": ["0.5.16"]},
            {"name": "flashinfer-0.6.4", "artifacts": ["flashinfer-python==0.6.4"], "serves": ["0.5.16"]}]})


@pytest.mark.parametrize(
    "requires",
    [
        pytest.param("flashinfer_python[cu13]==0.6.4", id="other-version"),
        pytest.param("flashinfer-python>=0.6.3", id="a-range"),
        pytest.param('flashinfer-python==0.6.3; sys_platform == "darwin"', id="under-a-marker"),
        pytest.param("torch==2.11.0", id="none"),
    ],
)
def test_a_served_release_must_pin_the_stacks_flashinfer_exactly(requires: str) -> None:
    catalog = _served_catalog(serves=["0.5.16"])
    metadata = f"Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.16\nRequires-Dist: {requires}\n"
    with pytest.raises(ConfigError, match=r"stack flashinfer-0\.6\.3 serves sglang 0\.5\.16, whose wheel "
                                          r"\(sglang-0\.5\.16\.whl\) pins .*, not the stack's 0\.6\.3"):
        catalog.check_served_pin(catalog.stack("flashinfer-0.6.3"), "0.5.16", metadata, "sglang-0.5.16.whl")
    fine = "Metadata-Version: 2.1\nName: sglang\nRequires-Dist: flashinfer_python[cu13]==0.6.3\n"
    catalog.check_served_pin(catalog.stack("flashinfer-0.6.3"), "0.5.16", fine, "sglang-0.5.16.whl")


def test_each_served_release_pins_its_stacks_flashinfer() -> None:
    """The repository's flashinfer-only stacks against the METADATA of the sglang wheels
    stacks.toml pins (``pin --no-stack``; fetched, sha256-checked): each served release pins
    the stack's flashinfer-python exactly."""
    from fp4graph.install.lock import check_served
    from fp4graph.model import config

    settings = config.Settings.from_env(REPO)
    catalog = stacks.load(REPO / "patches" / "stacks.toml")
    served = [(s, v) for s in catalog.stacks for v in s.serves]
    unpinned = [v for _, v in served if f"sglang=={v}" not in catalog.artifacts]
    assert served and not unpinned, f"pin them: python -m fp4graph pin sglang VERSION --no-stack: {unpinned}"
    for stack, release in served:
        check_served(settings, catalog, stack, release)  # what `fp4graph lock` refuses on
