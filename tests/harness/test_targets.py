"""The test targets read from a catalog and its series: a new stack needs no code change."""

from __future__ import annotations

import pathlib

import pytest

from harness import targets

CATALOG = '''
[[artifact]]
project = "flashinfer-python"
version = "{fi}"
revision = 1
files = [{{ filename = "flashinfer_python-{fi}-py3-none-any.whl", sha256 = "{sha}" }}]
'''
SGLANG = '''
[[artifact]]
project = "sglang"
version = "{sg}"
revision = 1
files = [{{ filename = "sglang-{sg}-py3-none-any.whl", sha256 = "{sha}" }}]

[[stack]]
name = "sglang-{sg}"
artifacts = ["sglang=={sg}", "flashinfer-python=={fi}"]
'''


def _repo(tmp: pathlib.Path, stacks: dict[str, str], series: dict[tuple[str, str], str]) -> pathlib.Path:
    patches = tmp / "patches"
    patches.mkdir()
    text = "".join(CATALOG.format(fi=fi, sha="0" * 64) for fi in sorted(set(stacks.values())))
    text += "".join(SGLANG.format(sg=sg, fi=fi, sha="1" * 64) for sg, fi in stacks.items())
    (patches / "stacks.toml").write_text(text)
    for (project, version), body in series.items():
        (patches / project / version).mkdir(parents=True)
        (patches / project / version / "series").write_text(body)
    return tmp


def _patch(topic: str) -> str:
    return (f"From 0 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] x\n\nDescription: x\nTopic: {topic}\n"
            "---\ndiff --git a/x b/x\n")


def test_sglang_targets_are_the_stacks_whose_sglang_has_a_series(tmp_path: pathlib.Path) -> None:
    repo = _repo(tmp_path, {"0.5.10": "0.6.7.post2", "0.5.9": "0.6.3", "0.5.12": "0.6.11.post1"},
                 {("sglang", "0.5.9"): "", ("sglang", "0.5.10"): ""})
    # Version order, not text order; the stack without a series (0.5.12) is not a target.
    assert list(targets.sglang_targets(repo).items()) == [("0.5.9", "0.6.3"), ("0.5.10", "0.6.7.post2")]
    assert targets.pinned_versions("flashinfer-python", repo) == ["0.6.3", "0.6.7.post2", "0.6.11.post1"]


def test_beside_sglang_leaves_out_flashinfer_only_stacks(tmp_path: pathlib.Path) -> None:
    repo = _repo(tmp_path, {"0.5.12": "0.6.11.post1"}, {})
    catalog = repo / "patches" / "stacks.toml"
    catalog.write_text(catalog.read_text() + CATALOG.format(fi="0.6.18", sha="2" * 64)
                       + '\n[[stack]]\nname = "flashinfer-0.6.18"\nartifacts = ["flashinfer-python==0.6.18"]\n')
    assert targets.pinned_versions("flashinfer-python", repo) == ["0.6.11.post1", "0.6.18"]
    assert targets.beside_sglang("flashinfer-python", repo) == {"0.6.11.post1"}
    assert targets.beside_sglang("sglang", repo) == {"0.5.12"}


def test_versions_with_topic_reads_the_series_and_its_bounds(tmp_path: pathlib.Path) -> None:
    versions = {"0.6.1": "fused-moe-ops", "0.6.3": "fused-moe-ops", "0.7.4": "fused-moe-ops", "0.6.8": "other"}
    series = {("flashinfer-python", v): "0001-x.patch\n" for v in versions}
    repo = _repo(tmp_path, {}, series)
    for version, topic in versions.items():
        (repo / "patches" / "flashinfer-python" / version / "0001-x.patch").write_text(_patch(topic))
    project = "flashinfer-python"
    assert targets.versions_with_topic(project, "fused-moe-ops", repo=repo) == ["0.6.1", "0.6.3", "0.7.4"]
    assert targets.versions_with_topic(project, "fused-moe-ops", below="0.7", repo=repo) == ["0.6.1", "0.6.3"]
    assert targets.versions_with_topic(project, "fused-moe-ops", at_least="0.6.3", below="0.7",
                                       repo=repo) == ["0.6.3"]
    assert targets.versions_with_topic(project, "absent", repo=repo) == []


def test_sm12x_gpus_are_the_simulated_family_sm120_first() -> None:
    from fp4graph.verify import simulate

    gpus = targets.sm12x_gpus()
    assert gpus[0] == "sm120" and set(gpus) == {"sm120", "sm121"}
    assert all(simulate.GPUS[g].capability[0] == 12 for g in gpus)


def test_ci_versions_are_the_seed_stacks_and_the_newest(monkeypatch: pytest.MonkeyPatch) -> None:
    versions = ["0.6.1", "0.6.3", "0.6.8.post1", "0.7.4"]
    monkeypatch.delenv("FP4GRAPH_MODELS", raising=False)
    assert targets.ci_versions(versions) == ["0.6.3", "0.7.4"]  # sglang-0.5.9 pins 0.6.3
    assert targets.ci_versions(["0.6.1"]) == ["0.6.1"]
    monkeypatch.setenv("FP4GRAPH_MODELS", "full")
    assert targets.ci_versions(versions) == versions


def test_ci_stacks_are_the_seed_stack_and_the_newest(monkeypatch: pytest.MonkeyPatch) -> None:
    names = ["sglang-0.5.8", "sglang-0.5.9", "sglang-0.5.10", "sglang-0.5.11"]
    monkeypatch.delenv("FP4GRAPH_MODELS", raising=False)
    assert targets.ci_stacks(names) == ["sglang-0.5.9", "sglang-0.5.11"]
    assert targets.ci_stacks(["sglang-0.5.8"]) == ["sglang-0.5.8"]  # the newest, seed or not
    assert targets.ci_stacks([]) == []
    monkeypatch.setenv("FP4GRAPH_MODELS", "full")
    assert targets.ci_stacks(names) == names
