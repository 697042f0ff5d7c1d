"""forward.rebase + forward.refresh on fixture releases: the patch-queue round trip's edges.

sglang 9.0.0 carries the two-patch fixture series; 9.0.1 is the same code (everything
carries); 9.0.2 already has the first patch (it becomes empty).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import pathlib
import re
import shutil
from collections.abc import Iterator

import pytest

from fp4graph.forward import pin, rebase, refresh
from fp4graph.forward.sources import SourceRepoError, git, git_env
from fp4graph.model.config import Settings
from fp4graph.model.errors import ConfigError
from fp4graph.model.series import load_series
from harness.checkout import fixture_requirements
from harness.releases import Index, make_release

from .test_new_version import P1, P2, QUANT, QUANT_900, SERIES, _sglang

DAY = datetime.date(2027, 3, 4)
FIRST_APPLIED = QUANT_900.replace("    return x\n", '    return ("quantized", x)  # fixture: the fp4 op\n')


@pytest.fixture
def settings(checkout: Settings, tmp_path: pathlib.Path) -> Iterator[Settings]:
    root = tmp_path / "dist"
    releases = [make_release(root, "sglang", v, _sglang(v, q), requires=[f"flashinfer_python=={v}"])
                for v, q in (("9.0.0", QUANT_900), ("9.0.1", QUANT_900), ("9.0.2", FIRST_APPLIED))]
    releases += [make_release(root, "flashinfer-python", v, {"flashinfer/__init__.py": ""})
                 for v in ("9.0.0", "9.0.1", "9.0.2")]
    with Index(releases).serve() as url, fixture_requirements("fixture-quantize", "fixture-warmup"):
        s = dataclasses.replace(checkout, index_url=url, cache_dir=tmp_path / "cache")
        for v in ("9.0.0", "9.0.1", "9.0.2"):
            pin.pin(s, "sglang", v)
        d = s.patches_dir / "sglang" / "9.0.0"
        d.mkdir()
        for name in (P1, P2):
            shutil.copy(SERIES / name, d / name)
        (d / "series").write_text(f"{P1}\n{P2}\n")
        yield s


def carried(settings: Settings, tmp_path: pathlib.Path, to: str = "9.0.1") -> pathlib.Path:
    out = settings.patches_dir / "sglang" / to
    results = rebase.rebase(settings, "sglang", "9.0.0", to, out, work_dir=tmp_path / "w", today=DAY)
    assert all(r.status in ("carried", "empty") for r in results), results
    return tmp_path / "w" / f"to-{to}"


def _blob(text: str) -> str:
    data = text.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def churned(text: str) -> str:
    """The same patch as another git writes it: ``[PATCH 1/2]`` (the Subject folded),
    full-length ``index`` blob ids, another signature, an older Last-Update."""
    text = text.replace("Subject: [PATCH] fix(quant): quantize through the fixture op",
                        "Subject: [PATCH 1/2] fix(quant): quantize through the\n fixture op")
    text = text.replace("index 3229bf1..5647ae4 100644",
                        f"index {_blob(QUANT_900)}..{_blob(FIRST_APPLIED)} 100644")
    text = re.sub(r"Last-Update: .*", "Last-Update: 2026-01-02", text)
    return text.replace("\n-- \nfp4graph\n", "\n-- \n2.39.5\n")


def test_refresh_of_an_untouched_rebase_keeps_what_did_not_change(settings, tmp_path) -> None:
    repo = carried(settings, tmp_path)
    out = settings.patches_dir / "sglang" / "9.0.1"
    written = {p.name: p.read_bytes() for p in out.iterdir()}
    assert written[P1] == (SERIES / P1).read_bytes()  # the same patch on 9.0.1: its bytes kept
    results = refresh.refresh("sglang", "9.0.1", repo, out, today=datetime.date(2027, 5, 6))
    assert [(r.name, r.status) for r in results] == [(P1, "unchanged"), (P2, "unchanged")]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == written


def test_rebase_and_refresh_keep_a_patch_whose_envelope_alone_differs(settings, tmp_path) -> None:
    source = settings.patches_dir / "sglang" / "9.0.0" / P1
    source.write_text(churned(source.read_text()))
    old = source.read_bytes()
    assert old != (SERIES / P1).read_bytes() and b"[PATCH 1/2]" in old and b"2.39.5" in old
    repo = carried(settings, tmp_path)
    out = settings.patches_dir / "sglang" / "9.0.1"
    assert (out / P1).read_bytes() == old  # rebase: nothing but the envelope differs
    assert refresh.refresh("sglang", "9.0.1", repo, out, today=DAY)[0].status == "unchanged"
    assert (out / P1).read_bytes() == old
    # a changed message is a changed patch, whatever the envelope
    env = git_env()
    git(repo, "rebase", "-q", "--exec", "git commit -q --amend -m \"$(git log -1 --format=%B | "
        "sed 's/^Fixture: the first patch/Fixture: the 1st patch/')\"", rebase.BASE_REF, env=env)
    results = refresh.refresh("sglang", "9.0.1", repo, out, today=DAY)
    assert [(r.name, r.status) for r in results] == [(P1, "refreshed"), (P2, "unchanged")]
    assert "Fixture: the 1st patch" in (out / P1).read_text()
    assert f"Last-Update: {DAY}" in (out / P1).read_text()


@pytest.mark.parametrize(
    ("edit", "same"),
    [
        (churned, True),
        (lambda t: t.replace("Fixture: the first", "Fixture: the 1st"), False),  # message
        (lambda t: t.replace("Topic: fixture-quantize", "Topic: fixture-q"), False),  # DEP-3
        (lambda t: t.replace("# fixture: the fp4 op", "# fixture: an fp4 op"), False),  # diff
        (lambda t: t.replace("Date: Sun, 29 Nov 2026 12:00", "Date: Sun, 29 Nov 2026 13:00"), False),
    ],
    ids=["envelope", "message", "topic", "diff", "date"],
)
def test_same_patch_ignores_the_envelope_only(edit, same) -> None:
    text = (SERIES / P1).read_text()
    assert edit(text) != text
    assert rebase.same_patch(text, edit(text)) is same


def test_an_amended_patch_is_refreshed_and_dated(settings, tmp_path) -> None:
    repo = carried(settings, tmp_path)
    out = settings.patches_dir / "sglang" / "9.0.1"
    env = git_env()
    (repo / QUANT).write_text((repo / QUANT).read_text() + "\n\nEXTRA = 1\n")
    git(repo, "commit", "-q", "-a", "--amend", "--no-edit", env=env)
    results = refresh.refresh("sglang", "9.0.1", repo, out, today=datetime.date(2027, 5, 6))
    assert [(r.name, r.status) for r in results] == [(P1, "unchanged"), (P2, "refreshed")]
    assert "Last-Update: 2027-05-06" in (out / P2).read_text()
    assert "+EXTRA = 1" in (out / P2).read_text()


def test_a_reordered_queue_renumbers_by_topic(settings, tmp_path) -> None:
    repo = carried(settings, tmp_path)
    out = settings.patches_dir / "sglang" / "9.0.1"
    env = git_env()
    base = git(repo, "rev-parse", rebase.BASE_REF).stdout.strip()
    first, second = git(repo, "rev-list", "--reverse", f"{base}..HEAD").stdout.split()
    git(repo, "reset", "-q", "--hard", base, env=env)
    git(repo, "cherry-pick", second, env=env)
    git(repo, "cherry-pick", first, env=env)
    refresh.refresh("sglang", "9.0.1", repo, out, today=DAY)
    names = (out / "series").read_text().split()
    assert names == ["0001-" + P2[5:], "0002-" + P1[5:]]
    assert load_series(settings.patches_dir, "sglang", "9.0.1").topics == ["fixture-warmup", "fixture-quantize"]


def test_a_commit_without_a_topic_is_named(settings, tmp_path) -> None:
    repo = carried(settings, tmp_path)
    (repo / "python/sglang/new.py").write_text("X = 1\n")
    git(repo, "add", "python/sglang/new.py")
    git(repo, "commit", "-q", "-m", "feat: a change without a header", env=git_env())
    with pytest.raises(ConfigError, match=r"commit [0-9a-f]{12} \('feat: a change without a header'\) "
                       r"has no 'Topic:' line"):
        refresh.refresh("sglang", "9.0.1", repo, settings.patches_dir / "sglang" / "9.0.1")


def test_refresh_never_drops_a_topic_silently(settings, tmp_path) -> None:
    repo = carried(settings, tmp_path)
    out = settings.patches_dir / "sglang" / "9.0.1"
    before = (out / "series").read_text()
    git(repo, "reset", "-q", "--hard", "HEAD~1", env=git_env())  # the warm-up patch is gone
    with pytest.raises(ConfigError, match=rf"refresh would drop {P2} \(topic fixture-warmup\).*--drop TOPIC"):
        refresh.refresh("sglang", "9.0.1", repo, out)
    assert (out / "series").read_text() == before
    results = refresh.refresh("sglang", "9.0.1", repo, out, drop=["fixture-warmup"])
    assert (out / "series").read_text() == f"{P1}\n# {P2}: dropped (--drop fixture-warmup)\n"
    assert results[-1].status == "dropped"
    assert not (out / P2).exists()
    # and the build refuses the series: fixture-warmup is required
    series = load_series(settings.patches_dir, "sglang", "9.0.1")
    assert "no patch carries topic 'fixture-warmup'" in series.refusals()[0]


def test_uncommitted_edits_are_refused(settings, tmp_path) -> None:
    repo = carried(settings, tmp_path)
    (repo / QUANT).write_text("edited\n")
    with pytest.raises(SourceRepoError, match=rf"uncommitted changes \({QUANT}\)"):
        refresh.refresh("sglang", "9.0.1", repo, settings.patches_dir / "sglang" / "9.0.1")


def test_rebase_keeps_a_resolution_in_progress(settings, tmp_path) -> None:
    carried(settings, tmp_path)
    out = settings.patches_dir / "sglang" / "9.0.1"
    with pytest.raises(ConfigError, match=r"to-9.0.1: exists \(a rebase being resolved\?\).*--force"):
        rebase.rebase(settings, "sglang", "9.0.0", "9.0.1", out, work_dir=tmp_path / "w")
    rebase.rebase(settings, "sglang", "9.0.0", "9.0.1", out, work_dir=tmp_path / "w", replace_work=True)


def test_a_patch_the_release_has_becomes_a_dropped_line(settings, tmp_path) -> None:
    out = settings.patches_dir / "sglang" / "9.0.2"
    results = rebase.rebase(settings, "sglang", "9.0.0", "9.0.2", out, work_dir=tmp_path / "w", today=DAY)
    assert [(r.name, r.status) for r in results] == [(P1, "empty"), (P2, "carried")]
    assert (out / "series").read_text() == f"# {P1}: dropped, 9.0.2 already has it\n{P2}\n"
    # refresh agrees (the empty commit is still in the work repository)
    results = refresh.refresh("sglang", "9.0.2", tmp_path / "w" / "to-9.0.2", out, today=DAY)
    dropped = "fixture-quantize (fix(quant): quantize through the fixture op)"
    assert [(r.name, r.status) for r in results] == [(dropped, "dropped"), ("0001-" + P2[5:], "unchanged")]
    assert (out / "series").read_text() == f"0001-{P2[5:]}\n# {dropped}: dropped, 9.0.2 already has it\n"
