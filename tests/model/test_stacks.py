from __future__ import annotations

import pytest

from fp4graph.model import stacks
from fp4graph.model.errors import ConfigError
from support.checkout import REPO

WHEEL = "flashinfer_python-0.6.3-py3-none-any.whl"
SHA = "0fe2de934a4b3690c543dafb03f38d7bb4a762431abe8ae4f7292d6fef10c65d"


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
    catalog = stacks.load(REPO / "patches" / "stacks.toml")
    names = [s.name for s in catalog.stacks]
    assert names == ["sglang-0.5.9", "sglang-0.5.10.post1", "sglang-0.5.11", "flashinfer-0.7.4"]
    fi = catalog.artifact("flashinfer_python", "0.6.3")
    assert fi.patched_version == "0.6.3+fp4graph.1"
    # sglang >= 0.5.11 ships one wheel per CPython: each is pinned on its own.
    sg = catalog.artifact("sglang", "0.5.11")
    assert [f.filename.split("-")[2] for f in sg.files] == ["cp310", "cp311", "cp312"]
    # nox -s tracing: which versions each stack torch pin traces.
    assert catalog.versions_by_torch() == {
        "2.9.1": ["0.5.9", "0.6.3", "0.5.10.post1", "0.6.7.post3"],
        "2.11.0": ["0.5.11", "0.6.8.post1"],
    }


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
    ],
)
def test_bad_artifact_is_rejected(raw: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        stacks.parse({"artifact": [raw]})


def test_stack_must_name_pinned_artifacts() -> None:
    data = {"artifact": [artifact()], "stack": [{"name": "s", "artifacts": ["sglang==0.5.9"]}]}
    with pytest.raises(ConfigError, match="'sglang==0.5.9' is not a pinned artifact"):
        stacks.parse(data)


def test_unknown_artifact_lookup_lists_pins() -> None:
    catalog = stacks.parse({"artifact": [artifact()]})
    with pytest.raises(ConfigError, match=r"flashinfer-python 9.9 is not pinned.*flashinfer-python==0.6.3"):
        catalog.artifact("flashinfer-python", "9.9")
