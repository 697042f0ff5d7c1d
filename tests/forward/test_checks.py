"""forward.checks: upstream's own pre-commit hooks, from the tree's config or our fallback."""

from __future__ import annotations

import pathlib

import pytest

from fp4graph.forward import checks

from .conftest import has_tools


def test_hooks_read_from_the_tree_config(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("yaml")
    (tmp_path / ".pre-commit-config.yaml").write_text(
        "exclude: ^python/sglang/srt/grpc/\nrepos:\n"
        "  - repo: https://github.com/psf/black\n    rev: 25.1.0\n    hooks:\n      - id: black-jupyter\n"
        "  - repo: https://github.com/PyCQA/isort\n    rev: 6.0.1\n    hooks:\n      - id: isort\n"
        "  - repo: https://github.com/codespell-project/codespell\n    rev: v2.4.1\n    hooks:\n"
        "      - id: codespell\n        args: ['-L', 'thi']\n"
        "  - repo: https://github.com/pre-commit/mirrors-clang-format\n    rev: v18.1.8\n    hooks:\n"
        "      - id: clang-format\n"
    )
    config, source = checks.load_config(tmp_path, "sglang")
    assert source == ".pre-commit-config.yaml in the tree"
    hooks = checks.hooks_for(config, "sglang")
    assert [(h.id, h.requirements[0]) for h in hooks] == [
        ("black-jupyter", "black==25.1.0"), ("isort", "isort==6.0.1"), ("codespell", "codespell==2.4.1"),
    ]
    black = hooks[0]
    assert black.selects("python/sglang/srt/x.py") and not black.selects("python/sglang/srt/grpc/x.py")
    assert not black.selects("README.md") and hooks[2].selects("README.md")


def test_sglang_fallback_config_carries_the_isort_settings() -> None:
    config, source = checks.load_config(pathlib.Path("/nonexistent"), "sglang")
    assert "(the tree has no .pre-commit-config.yaml)" in source
    isort = {h.id: h for h in checks.hooks_for(config, "sglang")}["isort"]
    # sglang's repo-root .isort.cfg: profile=black, known_first_party=sglang.
    assert isort.command == ("isort", "--check-only", "--diff", "--profile", "black", "--project", "sglang")


def test_missing_config_files_are_left_out(tmp_path: pathlib.Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    args = ["--toml", "python/pyproject.toml", "-L", "thi", "--config-file", "pyproject.toml"]
    kept, missing = checks.without_missing_configs(tmp_path, args)
    assert kept == ["-L", "thi", "--config-file", "pyproject.toml"]
    assert missing == ["python/pyproject.toml"]


@pytest.mark.skipif(not has_tools("ruff"), reason="ruff not installed (tests/forward/requirements.txt)")
def test_failures_upstream_has_too_are_not_the_series(tmp_path: pathlib.Path) -> None:
    base, tree = tmp_path / "base", tmp_path / "tree"
    for root in (base, tree):
        root.mkdir()
        (root / "old.py").write_text("x = [1,2]\n")  # unformatted upstream
        (root / "ok.py").write_text("y = 1\n")
    hook = checks.Hook(id="ruff-format", requirements=("ruff",), command=("ruff", "format", "--check"),
                       files=(), exclude=(), python_only=True)
    cache = tmp_path / "cache"
    run = checks.run_hooks(tree, [hook], ["old.py", "ok.py"], tools="path", cache_dir=cache)
    [before] = checks.mark_upstream_failures(run, [hook], tree, base, tools="path", cache_dir=cache)
    assert not before.ok and before.fails_upstream and not before.blocks
    assert before.status == "failed on upstream's files too"
    (tree / "ok.py").write_text("y = {1:2}\n")  # the series breaks a clean file
    (tree / "new.py").write_text("z = (1,2)\n")
    for files in (["old.py", "ok.py"], ["old.py", "new.py"]):
        run = checks.run_hooks(tree, [hook], files, tools="path", cache_dir=cache)
        [after] = checks.mark_upstream_failures(run, [hook], tree, base, tools="path", cache_dir=cache)
        assert after.blocks and after.status == "FAILED", files
