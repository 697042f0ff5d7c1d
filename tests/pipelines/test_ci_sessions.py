"""This repository's CI (.ci/run) runs every user-facing nox session at least once.

`.ci/run` runs `nox -s tests`, then `.ci/sessions`, which calls each other session of the
noxfile (a CPU-sized part of the GPU ones): a session added to the noxfile without a line
there fails here, before a user finds its missing install step.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys

from test_workflows import REPO, nox_argv, nox_sessions, session_names

RUN = REPO / ".ci" / "run"
SESSIONS = REPO / ".ci" / "sessions"


def called(path: pathlib.Path) -> set[str]:
    """Session names the script passes to nox (`step nox -s X`, `python3 -m nox -s X`)."""
    names: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if "nox -s" not in line:
            continue
        words = shlex.split(line.rstrip("\\"), comments=True)
        while words and (words[0] == "step" or "=" in words[0]):  # `VAR=... step nox ...`
            words = words[1:]
        argv = nox_argv(words)
        if argv and "-s" in argv:
            names.update(n.split("(", 1)[0] for n in nox_sessions(argv))
    return names


def test_ci_runs_the_tests_then_every_other_session() -> None:
    assert "tests" in called(RUN) and "bash .ci/sessions" in RUN.read_text()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOX")}
    listing = subprocess.run([sys.executable, "-m", "nox", "-l"], cwd=REPO, env=env,
                             capture_output=True, text=True, check=True).stdout
    every = {n.split("(", 1)[0] for n in session_names(listing)}
    missing = sorted(every - called(RUN) - called(SESSIONS))
    assert not missing, f".ci/sessions does not run {missing}: add a line for each"


def test_the_scripts_cite_only_files_the_repository_has() -> None:
    """A guide or file named in a comment of .ci/ exists (relative to the repository root)."""
    for script in (RUN, SESSIONS):
        cited = re.findall(r"[\w./-]+\.(?:md|toml|txt|py)\b", script.read_text(encoding="utf-8"))
        missing = [name for name in cited if not (REPO / name).exists()]
        assert not missing, f"{script.relative_to(REPO)} cites {missing}, which the repository lacks"
