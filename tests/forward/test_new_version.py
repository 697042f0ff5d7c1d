"""docs/adding-a-release.md, end to end, through ``python -m fp4graph``.

On fixture artifacts served by a local PEP 691 index (tests/harness/releases.py): sglang 9.0.0
has a two-patch series; sglang 9.1.0 changed the function the second patch touches.
pin 9.1.0 -> rebase 9.0.0 9.1.0 (the second patch conflicts and is written unresolved) ->
lint and wheels refuse, naming it -> resolve in the work repository, git rebase --continue
-> refresh -> the tests pick the new version up -> lint -> wheels builds 9.1.0+fp4graph.1.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import shutil
import zipfile
from collections.abc import Iterator

import pytest

from fp4graph import cli
from fp4graph.forward.sources import git, git_env
from fp4graph.model.config import Settings
from harness.checkout import fixture_requirements
from harness.releases import Index, make_release
from harness.targets import sglang_targets

from .conftest import FIXTURES

SERIES = FIXTURES / "new-version"
P1 = "0001-fix-quant-quantize-through-the-fixture-op.patch"
P2 = "0002-fix-piecewise-warm-the-fixture-op-up-before-capture.patch"
QUANT = "python/sglang/srt/quant.py"
QUANT_900 = '''"""Fixture: the module the fixture series patches."""


def quantize(x):
    return x


def warmup():
    pass
'''
# 9.1.0 changed warmup(): the second patch's context is gone.
QUANT_910 = QUANT_900.replace("def warmup():\n    pass\n", "def warmup(device=None):\n    return device\n")
RESOLVED = QUANT_910.replace("def quantize(x):\n    return x\n",
                             'def quantize(x):\n    return ("quantized", x)  # fixture: the fp4 op\n'
                             ).replace("    return device\n",
                                       "    quantize(None)  # fixture: build before capture\n    return device\n")


def _sglang(version: str, quant: str) -> dict[str, str]:
    return {"python/sglang/__init__.py": "", "python/sglang/_version.py": f'__version__ = "{version}"\n',
            QUANT: quant}


@pytest.fixture
def index(tmp_path: pathlib.Path) -> Iterator[str]:
    root = tmp_path / "dist"
    fi = {"flashinfer/__init__.py": ""}
    releases = [
        make_release(root, "sglang", "9.0.0", _sglang("9.0.0", QUANT_900),
                     requires=["flashinfer_python==9.0.0", "torch==2.9.1"]),
        make_release(root, "sglang", "9.1.0", _sglang("9.1.0", QUANT_910),
                     requires=["flashinfer_python==9.1.0", "torch==2.9.1"]),
        *(make_release(root, "flashinfer-python", v, {**fi, "flashinfer/_build_meta.py": f'__version__ = "{v}"\n'})
          for v in ("9.0.0", "9.1.0")),
    ]
    with Index(releases).serve() as url:
        yield url


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_adding_a_new_upstream_version(
    checkout: Settings, index: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(checkout.repo)
    monkeypatch.setenv("FP4GRAPH_CACHE", str(tmp_path / "cache"))
    work = tmp_path / "work"
    patches = checkout.patches_dir / "sglang"
    with fixture_requirements("fixture-quantize", "fixture-warmup"):
        # the release we already carry: pinned, with its series
        assert run(capsys, "pin", "sglang", "9.0.0", "--index-url", index)[0] == 0
        (patches / "9.0.0").mkdir()
        for name in (P1, P2):
            shutil.copy(SERIES / name, patches / "9.0.0" / name)
        (patches / "9.0.0" / "series").write_text(f"{P1}\n{P2}\n")
        shutil.rmtree(patches / "0.5.9")  # the fixture marker series: not this test's topics
        shutil.rmtree(checkout.patches_dir / "flashinfer-python" / "0.6.3")

        # 1. pin
        code, out = run(capsys, "pin", "sglang", "9.1.0", "--index-url", index)
        assert code == 0 and "stack sglang-9.1.0 (torch 2.9.1)" in out, out
        # 2. rebase: the second patch conflicts and stays in the series, unresolved
        code, out = run(capsys, "rebase", "sglang", "9.0.0", "9.1.0", "--work-dir", str(work),
                        "--index-url", index)
        assert code == 1, out
        assert f"{P1}: carried: applied cleanly" in out
        assert f"{P2}: conflict: conflicts in {QUANT}" in out
        assert "1 written as unresolved" in out
        assert (patches / "9.1.0" / "series").read_text() == (
            f"{P1}\n{P2} unresolved  # conflicts in {QUANT}\n")
        assert (patches / "9.1.0" / P2).read_bytes() == (SERIES / P2).read_bytes()  # nothing lost
        # lint and the build refuse it, naming the patch and the fix
        code, out = run(capsys, "lint")
        assert code == 1 and f"patches/sglang/9.1.0/series: {P2} is unresolved" in out, out
        before = sorted(p.name for p in checkout.wheels_dir.iterdir())
        code, out = run(capsys, "wheels", "--stack", "sglang-9.1.0", "--index-url", index)
        assert code == 2 and "PatchError: refusing to build" in out and f"{P2} is unresolved" in out, out
        assert "python -m fp4graph refresh sglang 9.1.0" in out
        assert sorted(p.name for p in checkout.wheels_dir.iterdir()) == before
        # refresh refuses while git is still mid-rebase
        code, out = run(capsys, "refresh", "sglang", "9.1.0", "--work-dir", str(work))
        assert code == 2 and "a rebase is in progress" in out, out

        # 3. resolve as with any git rebase
        repo = work / "to-9.1.0"
        (repo / QUANT).write_text(RESOLVED)
        env = dict(git_env(), GIT_EDITOR="true")
        git(repo, "add", QUANT, env=env)
        git(repo, "rebase", "--continue", env=env)
        # 4. refresh: the resolved commits become the series
        code, out = run(capsys, "refresh", "sglang", "9.1.0", "--work-dir", str(work))
        assert code == 0, out
        assert (patches / "9.1.0" / "series").read_text() == f"{P1}\n{P2}\n"
        text = (patches / "9.1.0" / P2).read_text()
        assert text.startswith("From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n")
        assert "Subject: [PATCH] fix(piecewise): warm the fixture op up" in text
        assert "Topic: fixture-warmup\n" in text and text.endswith("-- \nfp4graph\n\n")
        assert f"Last-Update: {datetime.date.today().isoformat()}" in text
        assert "+    quantize(None)  # fixture: build before capture" in text

        # 5. the simulation tests take the new stack from stacks.toml and the series
        assert sglang_targets(checkout.repo)["9.1.0"] == "9.1.0"
        # 6. lint, build
        code, out = run(capsys, "lint")
        assert (code, out.strip()) == (0, "lint: 0 problem(s)"), out
        code, out = run(capsys, "wheels", "--stack", "sglang-9.1.0", "--index-url", index)
        assert code == 0 and "sglang==9.1.0+fp4graph.1 flashinfer-python==9.1.0" in out, out
    manifest = json.loads((checkout.wheels_dir / "manifest.json").read_text())
    built = manifest["artifacts"]["sglang==9.1.0"]["wheels"][0]["filename"]
    assert built == "sglang-9.1.0+fp4graph.1-py3-none-any.whl"
    with zipfile.ZipFile(checkout.wheels_dir / built) as zf:
        assert zf.read("sglang/srt/quant.py").decode() == RESOLVED
        assert '"9.1.0+fp4graph.1"' in zf.read("sglang/_version.py").decode()
