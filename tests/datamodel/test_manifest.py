"""wheels/manifest.json as typed records: pins with parsed versions, one reader and one writer,
the format of earlier builds, and a bad file named with the entry at fault."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest
from packaging.version import Version

from fp4graph.model import manifest
from fp4graph.model.manifest import (
    BuiltArtifact,
    BuiltStack,
    BuiltWheel,
    Manifest,
    ManifestError,
    PatchRecord,
    Pin,
    SeriesRecord,
)
from fp4graph.model.stacks import ArtifactFile

SHA = "0" * 64


def _sample() -> Manifest:
    sglang = BuiltArtifact(
        project="sglang", upstream_version="0.5.10.post1", version=Version("0.5.10.post1+fp4graph.3"),
        upstream_files=(ArtifactFile(filename="sglang-0.5.10.post1-py3-none-any.whl", sha256=SHA),),
        series=SeriesRecord(path="patches/sglang/0.5.10.post1/series", sha256=SHA,
                            patches=(PatchRecord(name="0001-x.patch", subject="fix: x", sha256=SHA),)),
        wheels=(BuiltWheel(filename="sglang-0.5.10.post1+fp4graph.3-py3-none-any.whl", sha256=SHA,
                           upstream_filename="sglang-0.5.10.post1-py3-none-any.whl", upstream_sha256=SHA),),
    )
    flashinfer = BuiltArtifact(
        project="flashinfer-python", upstream_version="0.6.7.post3", version=Version("0.6.7.post3"),
        upstream_files=(), series=None, wheels=(),
    )
    stack = BuiltStack(name="sglang-0.5.10.post1", artifacts=("sglang==0.5.10.post1", "flashinfer-python==0.6.7.post3"),
                       pins=(sglang.pin, flashinfer.pin))
    return Manifest(fp4graph="0.1.0", stacks=(stack,),
                    artifacts={"sglang==0.5.10.post1": sglang, "flashinfer-python==0.6.7.post3": flashinfer})


@pytest.mark.parametrize(
    ("text", "upstream", "revision"),
    [
        pytest.param("sglang==0.5.9+fp4graph.4", "0.5.9", 4, id="patched"),
        pytest.param("sglang==0.5.10.post1+fp4graph.12", "0.5.10.post1", 12, id="post-release"),
        pytest.param("flashinfer-python==0.6.3", "0.6.3", None, id="upstream"),
        pytest.param("torch==2.9.1+cu128", "2.9.1", None, id="another-local-label"),
    ],
)
def test_pin_revision_is_the_local_label(text: str, upstream: str, revision: int | None) -> None:
    pin = Pin.parse(text)
    assert pin.requirement == text and pin.upstream_version == upstream
    assert pin.revision == revision and pin.patched is (revision is not None)


def test_round_trip(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "manifest.json"
    manifest.write(path, _sample())
    read = manifest.read(path)
    assert read == _sample() and read.path == path
    assert read.stack("sglang-0.5.10.post1").pin("sglang") == Pin.parse("sglang==0.5.10.post1+fp4graph.3")
    data = json.loads(path.read_text())
    assert data["format"] == 1 and "path" not in data
    assert data["stacks"][0]["pins"] == ["sglang==0.5.10.post1+fp4graph.3", "flashinfer-python==0.6.7.post3"]
    assert data["artifacts"]["flashinfer-python==0.6.7.post3"]["series"] is None
    manifest.write(path, read)
    assert json.loads(path.read_text()) == data  # the writer writes what the reader read


def test_earlier_and_later_manifests(tmp_path: pathlib.Path) -> None:
    """A manifest written before ``format`` existed reads as format 1; keys this version does
    not know (a newer build's additions of the same format) are ignored; a newer format is
    refused with what to do."""
    path = tmp_path / "manifest.json"
    data = _sample().to_json()
    del data["format"]
    data["stacks"][0]["signature"] = {"path": "x.sig", "sha256": SHA}
    path.write_text(json.dumps(data))
    assert manifest.read(path) == _sample()
    path.write_text(json.dumps({**data, "format": 2}))
    with pytest.raises(ManifestError, match=r"manifest.json: format 2, newer than this fp4graph reads \(1\)"):
        manifest.read(path)


def _broken(tmp_path: pathlib.Path, edit: str) -> pathlib.Path:
    data = _sample().to_json()
    stack, artifact = data["stacks"][0], data["artifacts"]["sglang==0.5.10.post1"]
    if edit == "pin":
        stack["pins"][1] = "flashinfer-python=0.6.7"
    elif edit == "version":
        artifact["version"] = "0.5.10.post1+fp4graph.3!"
    elif edit == "missing":
        del artifact["wheels"][0]["sha256"]
    elif edit == "type":
        stack["artifacts"] = "sglang==0.5.10.post1"
    elif edit == "top":
        del data["stacks"]
    path = tmp_path / "wheels" / "manifest.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data) if edit != "json" else "{")
    return path


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        pytest.param("pin", "stacks[0].pins[1]: pin 'flashinfer-python=0.6.7' is not 'project==version'", id="bad-pin"),
        pytest.param("version", "artifacts['sglang==0.5.10.post1'].version: '0.5.10.post1+fp4graph.3!' is not a PEP 440 version",
                     id="bad-version"),
        pytest.param("missing", "artifacts['sglang==0.5.10.post1'].wheels[0]: no 'sha256'", id="missing-field"),
        pytest.param("type", "stacks[0].artifacts: expected a list, got 'sglang==0.5.10.post1'", id="wrong-type"),
        pytest.param("top", "the top level: no 'stacks'", id="no-stacks"),
        pytest.param("json", "not a JSON manifest (Expecting property name", id="not-json"),
    ],
)
def test_a_bad_manifest_names_the_file_and_the_entry(tmp_path: pathlib.Path, edit: str, message: str) -> None:
    path = _broken(tmp_path, edit)
    with pytest.raises(ManifestError) as caught:
        manifest.read_built(path.parent)
    assert str(caught.value).startswith(f"{path}: {message}"), caught.value
    assert str(caught.value).endswith("rebuild it with `nox -s wheels`")


def test_no_manifest_and_an_unbuilt_stack(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ManifestError, match=r"manifest.json: no such file; run `nox -s wheels` first"):
        manifest.read_built(tmp_path)
    path = tmp_path / "manifest.json"
    manifest.write(path, dataclasses.replace(_sample(), stacks=()))
    with pytest.raises(ManifestError, match=r"stack 'sglang-0.5.9' was not built; built: none; "
                                            r"build it with `nox -s wheels -- --stack sglang-0.5.9`"):
        manifest.read(path).stack("sglang-0.5.9")


def test_a_served_release_reads_as_a_stack_of_its_own(tmp_path: pathlib.Path) -> None:
    """A flashinfer-only stack records the sglang releases it serves; ``stack("sglang-X")``
    is PyPI's sglang X beside the stack's pins, with the release's lock."""
    from fp4graph.model.manifest import BuiltServed, PublishedLock

    lock = PublishedLock(path="locks/sglang-0.5.16.txt", sha256=SHA)
    fi = BuiltStack(name="flashinfer-0.6.14", artifacts=("flashinfer-python==0.6.14",),
                    pins=(Pin.parse("flashinfer-python==0.6.14+fp4graph.1"),),
                    served=(BuiltServed(sglang="0.5.16", lock=lock), BuiltServed(sglang="0.5.16.post1")))
    path = tmp_path / "manifest.json"
    manifest.write(path, dataclasses.replace(_sample(), stacks=(*_sample().stacks, fi)))
    read = manifest.read(path)
    served = read.stack("sglang-0.5.16")
    assert [p.requirement for p in served.pins] == ["sglang==0.5.16", "flashinfer-python==0.6.14+fp4graph.1"]
    assert served.lock == lock and served.artifacts == fi.artifacts and served.served == ()
    assert read.stack("sglang-0.5.16.post1").lock is None
    assert [s.name for s in read.installable()] == ["sglang-0.5.10.post1", "flashinfer-0.6.14", "sglang-0.5.16",
                                                    "sglang-0.5.16.post1"]
    with pytest.raises(ManifestError, match=r"stack 'sglang-0.5.17' was not built; built: .*flashinfer-0.6.14, "
                                            r"sglang-0.5.16, sglang-0.5.16.post1;"):
        read.stack("sglang-0.5.17")
