"""The GitHub Actions workflows under pipelines/github/ that users copy into .github/workflows/.

Each workflow must validate against GitHub's workflow schema, hand every piece of work to
a nox session that the repository's noxfile defines, use only the four allowed actions
pinned by commit, and ask for no more token permissions than it needs.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from ruamel.yaml import YAML

REPO = pathlib.Path(__file__).resolve().parents[2]
WORKFLOW_DIR = REPO / "pipelines" / "github"
WORKFLOWS = sorted(WORKFLOW_DIR.glob("*.yml"))

ALLOWED_ACTIONS = {
    "actions/checkout",
    "actions/setup-python",
    "actions/cache",
    "actions/upload-artifact",
}
USES = re.compile(r"^(?P<action>[^@\s]+)@(?P<ref>[^\s#]+)$")
SHA = re.compile(r"^[0-9a-f]{40}$")

# The token permissions each workflow needs, and no more.
PERMISSIONS = {
    "checks": {"contents": "read"},
    "gpu": {"contents": "read"},
    "release": {"contents": "write"},  # gh release create
    "drift": {"contents": "read", "issues": "write"},  # the tracking issue
    "install": {"contents": "read"},
    "kernels": {"contents": "read"},
    "spark": {"contents": "read"},
}

# Every `run:` step is exactly one command of one of these kinds: installing nox, a nox
# call, or (release only) one GitHub CLI call on what nox wrote.
BOOTSTRAP = ["python", "-m", "pip", "install", "-r", "pipelines/requirements.txt"]
GH_ALLOWED = {"release": ("release", "create")}

# Options of nox that select sessions, and those that select by something else.
SESSION_OPTIONS = {"-s", "-e", "--session", "--sessions"}
OTHER_SELECTORS = {"-k", "--keywords", "-t", "--tags"}


def workflow_ids() -> list[str]:
    return [p.stem for p in WORKFLOWS]


def load(path: pathlib.Path) -> dict[str, Any]:
    data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path}: not a YAML mapping"
    return data


def steps(workflow: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for job_id, job in workflow["jobs"].items():
        for step in job.get("steps", []):
            yield job_id, step


def commands(script: str) -> list[list[str]]:
    """Split a `run:` script into commands (newlines, `;`, `&&`, `||`, `|` separate them)."""
    result: list[list[str]] = []
    for line in re.sub(r"\\\n", " ", script).splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        current: list[str] = []
        for token in lexer:
            if token and set(token) <= set(";&|"):
                result += [current] if current else []
                current = []
            else:
                current.append(token)
        result += [current] if current else []
    return result


def nox_argv(command: list[str]) -> list[str] | None:
    """The arguments after `nox` if ``command`` runs nox, else None."""
    if command[:1] == ["nox"]:
        return command[1:]
    if len(command) >= 3 and command[1:3] == ["-m", "nox"] and command[0].startswith("python"):
        return command[3:]
    return None


def nox_sessions(argv: list[str]) -> list[str]:
    """Session names that ``nox <argv>`` selects; posargs after `--` are not sessions.

    Handles `-s a b c`, repeated `-s`, `--session=a`, `-sa` and options in between.
    Raises ValueError when the call does not name its sessions.
    """
    sessions: list[str] = []
    collecting = False
    for arg in argv:
        if arg == "--":
            break
        if arg.startswith("-"):
            collecting = False
            option, eq, value = arg.partition("=")
            if option in OTHER_SELECTORS:
                raise ValueError(f"selects sessions with {option}; name them with -s")
            if option in SESSION_OPTIONS:
                collecting = True
                if eq:
                    sessions.append(value)
            elif option.startswith("-s") and not option.startswith("--") and len(option) > 2:
                sessions.append(arg[2:])
                collecting = True
            continue
        if collecting:
            sessions.append(arg)
    if not sessions:
        raise ValueError("names no session (nox -s NAME ...)")
    return sessions


def session_names(listing: str) -> set[str]:
    """Names `nox -s` accepts, from `nox -l` output.

    A listed session may carry a Python version (`tests-3.11`) or parameters
    (`tracing(torch='2.13.0')`); `nox -s tests` / `nox -s tracing` select those too.
    """
    names: set[str] = set()
    for line in listing.splitlines():
        match = re.match(r"^[*-] (\S+(?:\(.*?\))?)(?: -> .*)?$", line)
        if not match:
            continue
        signature = match.group(1)
        names.add(signature)
        base = signature.split("(", 1)[0]
        names.add(base)
        names.add(re.sub(r"-(?:\d+(?:\.\d+)*t?|pypy[\d.]*)$", "", base))
    return names


@pytest.fixture(scope="module")
def nox_list() -> set[str]:
    if not (REPO / "noxfile.py").is_file():
        pytest.fail(f"{REPO / 'noxfile.py'} does not exist: the workflows call its sessions")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOX")}
    result = subprocess.run(
        [sys.executable, "-m", "nox", "-l"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, (
        f"nox -l failed (rc={result.returncode}):\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    )
    names = session_names(result.stdout)
    assert names, f"nox -l listed no sessions:\n{result.stdout}"
    return names


def test_the_workflows_exist() -> None:
    assert set(workflow_ids()) == set(PERMISSIONS), f"pipelines/github/ holds {workflow_ids()}"


def test_readme_documents_every_workflow() -> None:
    readme = (REPO / "pipelines" / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in WORKFLOWS if f"pipelines/github/{p.name}" not in readme]
    assert not missing, f"pipelines/README.md does not describe {missing}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=workflow_ids())
def test_workflow_validates_against_github_schema(path: pathlib.Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.github-workflows",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"{path.name}:\n{result.stdout}\n{result.stderr}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=workflow_ids())
def test_workflow_names_only_existing_nox_sessions(path: pathlib.Path, nox_list: set[str]) -> None:
    called: list[str] = []
    for job_id, step in steps(load(path)):
        for command in commands(step.get("run", "")):
            argv = nox_argv(command)
            if argv is None:
                continue
            try:
                called += nox_sessions(argv)
            except ValueError as exc:
                pytest.fail(f"{path.name} job {job_id!r}: {shlex.join(command)!r} {exc}")
    assert called, f"{path.name} calls no nox session"
    unknown = sorted(set(called) - nox_list)
    assert not unknown, (
        f"{path.name} calls nox sessions {unknown} that `nox -l` does not list "
        f"(it lists {sorted(nox_list)})"
    )


@pytest.mark.parametrize("path", WORKFLOWS, ids=workflow_ids())
def test_run_steps_only_hand_over_to_nox(path: pathlib.Path) -> None:
    """No logic in YAML: each `run:` is one nox call, the nox install, or an allowed gh call."""
    for job_id, step in steps(load(path)):
        if "run" not in step:
            continue
        where = f"{path.name} job {job_id!r} step {step.get('name', step['run'])!r}"
        cmds = commands(step["run"])
        assert len(cmds) == 1, f"{where}: runs {len(cmds)} commands; put the logic in nox"
        (command,) = cmds
        if command == BOOTSTRAP or nox_argv(command) is not None:
            continue
        allowed = GH_ALLOWED.get(path.stem)
        assert allowed is not None and tuple(command[1:3]) == allowed and command[0] == "gh", (
            f"{where}: {shlex.join(command)!r} is neither a nox call nor the allowed gh call"
        )


@pytest.mark.parametrize("path", WORKFLOWS, ids=workflow_ids())
def test_actions_are_allowed_and_pinned_by_commit(path: pathlib.Path) -> None:
    workflow = load(path)
    for job_id, job in workflow["jobs"].items():
        assert "uses" not in job, f"{path.name} job {job_id!r} calls a reusable workflow"
    for job_id, step in steps(workflow):
        if "uses" not in step:
            continue
        match = USES.match(step["uses"])
        assert match, f"{path.name} job {job_id!r}: malformed uses {step['uses']!r}"
        assert match["action"] in ALLOWED_ACTIONS, (
            f"{path.name} job {job_id!r} uses {match['action']!r}; "
            f"only {sorted(ALLOWED_ACTIONS)} are allowed"
        )
        assert SHA.match(match["ref"]), (
            f"{path.name} job {job_id!r}: {step['uses']!r} is not pinned by a 40-hex commit SHA"
        )
    # The raw text names the release each pin stands for: `uses: a/b@<sha> # vX.Y.Z`.
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if re.match(r"^\s*(?:-\s+)?uses:", line):
            assert re.search(r"@[0-9a-f]{40} # v\d+(?:\.\d+)*\s*$", line), (
                f"{path.name}:{number}: pin lacks its tag comment: {line.strip()!r}"
            )


def test_each_action_is_pinned_to_one_commit_everywhere() -> None:
    pins: dict[str, set[str]] = {}
    for path in WORKFLOWS:
        for _, step in steps(load(path)):
            if "uses" in step:
                action, _, ref = step["uses"].partition("@")
                pins.setdefault(action, set()).add(ref)
    mixed = {action: refs for action, refs in pins.items() if len(refs) > 1}
    assert not mixed, f"actions pinned to different commits across workflows: {mixed}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=workflow_ids())
def test_permissions_are_least_privilege(path: pathlib.Path) -> None:
    workflow = load(path)
    assert workflow.get("permissions") == PERMISSIONS[path.stem], (
        f"{path.name}: top-level permissions {workflow.get('permissions')!r}, "
        f"expected {PERMISSIONS[path.stem]!r}"
    )
    for job_id, job in workflow["jobs"].items():
        assert "permissions" not in job, f"{path.name} job {job_id!r} widens permissions"
    for job_id, step in steps(workflow):
        if step.get("uses", "").startswith("actions/checkout@"):
            assert step.get("with", {}).get("persist-credentials") is False, (
                f"{path.name} job {job_id!r}: checkout must not leave the token in .git/config"
            )


@pytest.mark.parametrize("path", WORKFLOWS, ids=workflow_ids())
def test_upstream_cache_is_keyed_on_the_stacks_file(path: pathlib.Path) -> None:
    workflow = load(path)
    for job_id, step in steps(workflow):
        if step.get("uses", "").startswith("actions/cache@"):
            config = step["with"]
            assert "hashFiles('patches/stacks.toml')" in config["key"], (
                f"{path.name} job {job_id!r}: cache key {config['key']!r}"
            )
            assert config["path"] == "${{ env.FP4GRAPH_CACHE }}", (
                f"{path.name} job {job_id!r}: cache path {config['path']!r} is not FP4GRAPH_CACHE"
            )
            assert "FP4GRAPH_CACHE" in workflow.get("env", {}), (
                f"{path.name}: caches FP4GRAPH_CACHE without setting it"
            )


def test_install_runs_every_sglang_stack() -> None:
    """The scheduled install pipeline has a job for each stack with sglang, no other."""
    sys.path.insert(0, str(REPO / "src"))
    from fp4graph.model.stacks import load as load_stacks

    catalog = load_stacks(REPO / "patches" / "stacks.toml")
    wanted = [s.name for s in catalog.sglang_stacks()]
    jobs = load(WORKFLOW_DIR / "install.yml")["jobs"]
    assert sorted(jobs) == ["install", "served"]
    assert jobs["install"]["strategy"]["matrix"]["stack"] == wanted
    assert "schedule" in load(WORKFLOW_DIR / "install.yml")["on"]
    # ... and a job for each sglang release a flashinfer-only stack serves, built from that stack.
    from fp4graph.model.stacks import served_name

    served = [{"release": served_name(v), "stack": s.name} for s in catalog.stacks for v in s.serves]
    assert served and jobs["served"]["strategy"]["matrix"]["include"] == served


def test_checks_caches_the_upstream_artifacts() -> None:
    uses = [s.get("uses", "") for _, s in steps(load(WORKFLOW_DIR / "checks.yml"))]
    assert any(u.startswith("actions/cache@") for u in uses)


def test_kernels_publishes_only_the_kernels_wheels_from_a_configurable_runner() -> None:
    """kernels.yml runs after release.yml has published the patched wheels: it uploads the
    flashinfer-jit-cache wheels alone (publish refuses what the index has)."""
    workflow = load(WORKFLOW_DIR / "kernels.yml")
    (job,) = workflow["jobs"].values()
    assert job["runs-on"][0] == "self-hosted"
    assert "inputs.runner-label" in job["runs-on"][1] and "vars.FP4GRAPH_KERNELS_RUNNER_LABEL" in job["runs-on"][1]
    runs = [c for _, step in steps(workflow) for c in commands(step.get("run", ""))]
    (publish,) = [c for c in runs if nox_argv(c) and "publish" in nox_sessions(nox_argv(c) or [])]
    assert publish[-2:] == ["--project", "flashinfer-jit-cache"], publish
    (build,) = [c for c in runs if nox_argv(c) and nox_sessions(nox_argv(c) or []) == ["kernels"]]
    # The platform input reaches the build (empty: the runner's own; linux-aarch64: a DGX Spark's).
    assert build[-2:] == ["--platform", "$FP4GRAPH_PLATFORM"], build
    assert "platform" in workflow["on"]["workflow_dispatch"]["inputs"]
    assert job["env"]["FP4GRAPH_PLATFORM"] == "${{ inputs.platform }}"


def test_spark_builds_publishes_installs_for_aarch64_and_runs_the_integration() -> None:
    """spark.yml: on a self-hosted GB10 runner: kernels for 12.1a, publish only them, the
    linux-aarch64 install (the README's DGX Spark command) and nox -s integration."""
    workflow = load(WORKFLOW_DIR / "spark.yml")
    (job,) = workflow["jobs"].values()
    assert job["runs-on"][0] == "self-hosted" and "vars.FP4GRAPH_SPARK_RUNNER_LABEL" in job["runs-on"][1]
    runs = [nox_argv(c) or [] for _, step in steps(workflow) for c in commands(step.get("run", ""))]
    sessions = [nox_sessions(argv)[0] for argv in runs if argv]
    assert sessions == ["wheels", "kernels", "publish", "install", "integration"]
    kernels, publish, install = (next(a for a in runs if a and nox_sessions(a) == [s])
                                 for s in ("kernels", "publish", "install"))
    assert kernels[-2:] == ["--arch", "12.1a"] and publish[-2:] == ["--project", "flashinfer-jit-cache"]
    assert install[-2:] == ["--platform", "linux-aarch64"]


def test_gpu_runner_label_is_configurable() -> None:
    workflow = load(WORKFLOW_DIR / "gpu.yml")
    dispatch = workflow["on"]["workflow_dispatch"]
    assert "runner-label" in dispatch["inputs"]
    (job,) = workflow["jobs"].values()
    runs_on = job["runs-on"]
    assert runs_on[0] == "self-hosted"
    assert "inputs.runner-label" in runs_on[1] and "vars.FP4GRAPH_GPU_RUNNER_LABEL" in runs_on[1]
    assert "schedule" in workflow["on"]


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        pytest.param("nox -s lint", [["nox", "-s", "lint"]], id="one"),
        pytest.param("nox -s a b \\\n  c", [["nox", "-s", "a", "b", "c"]], id="continuation"),
        pytest.param("nox -s a && gh x\n", [["nox", "-s", "a"], ["gh", "x"]], id="and"),
        pytest.param("a; b | c\nd", [["a"], ["b"], ["c"], ["d"]], id="separators"),
        pytest.param('gh r "$X y"', [["gh", "r", "$X y"]], id="quotes"),
    ],
)
def test_commands_splits_scripts(script: str, expected: list[list[str]]) -> None:
    assert commands(script) == expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param("nox -s lint tests wheels", ["lint", "tests", "wheels"], id="many"),
        pytest.param('nox -s publish -- "$URL"', ["publish"], id="posargs"),
        pytest.param("nox -s drift -- -s fake", ["drift"], id="posargs-look-like-options"),
        pytest.param("nox -s a -s b", ["a", "b"], id="repeated"),
        pytest.param("nox --session=a -e b", ["a", "b"], id="forms"),
        pytest.param("nox -sa", ["a"], id="attached"),
        pytest.param("nox -R -s a b --no-venv", ["a", "b"], id="options-around"),
        pytest.param("nox -s a --force-python 3.11", ["a"], id="option-with-value-after"),
        pytest.param("python -m nox -s gpu", ["gpu"], id="python-m"),
    ],
)
def test_nox_sessions_parses_calls(line: str, expected: list[str]) -> None:
    argv = nox_argv(shlex.split(line))
    assert argv is not None
    assert nox_sessions(argv) == expected


@pytest.mark.parametrize(
    ("line", "match"),
    [
        pytest.param("nox", "names no session", id="bare"),
        pytest.param("nox -- x", "names no session", id="posargs-only"),
        pytest.param("nox -k 'lint or tests'", "with -k", id="keywords"),
        pytest.param("nox -t ci", "with -t", id="tags"),
    ],
)
def test_nox_sessions_rejects_unnamed_selection(line: str, match: str) -> None:
    argv = nox_argv(shlex.split(line))
    assert argv is not None
    with pytest.raises(ValueError, match=match):
        nox_sessions(argv)


def test_session_names_reads_nox_list() -> None:
    listing = (
        "Sessions defined in /repo/noxfile.py:\n\n"
        "* lint -> Lint.\n"
        "- gpu -> GPU tests.\n"
        "* tests-3.11 -> Tests.\n"
        "* tracing(torch='2.13.0') -> Tracing.\n"
        "- build-release\n\n"
        "sessions marked with * are selected, sessions marked with - are skipped.\n"
    )
    assert session_names(listing) == {
        "lint",
        "gpu",
        "tests-3.11",
        "tests",
        "tracing(torch='2.13.0')",
        "tracing",
        "build-release",
    }
