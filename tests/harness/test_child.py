"""The child-interpreter runner the simulation tests stand on."""

from __future__ import annotations

import pathlib

import pytest

from harness import child


def test_trees_come_first_then_fp4graph(tmp_path: pathlib.Path) -> None:
    """A tree on ``path`` shadows an installed module; fp4graph's src/ follows it."""
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "__init__.py").write_text("WHERE = 'tree'\n")
    result = child.run_python(
        "import json, sys, fp4graph; print(json.WHERE); print(sys.path[1:3]); print(fp4graph.__file__)",
        path=[tmp_path], env={"FP4GRAPH_PROBE": "x"},
    )
    assert result.returncode == 0, child.tail(result)
    where, path, package = result.stdout.splitlines()
    assert where == "tree"
    assert path == repr([str(tmp_path), str(child.SRC)])
    assert pathlib.Path(package).is_relative_to(child.SRC)


def test_a_child_temporary_directory_is_its_own_and_removed(tmp_path: pathlib.Path) -> None:
    """What a child leaves in its temporary directory (the simulation's ``mkdtemp`` trees)
    is gone when it returns; a ``TMPDIR`` the caller names is kept."""
    code = "import tempfile; d = tempfile.mkdtemp(prefix='left-'); open(d + '/f', 'w').close(); print(d)"
    result = child.run_python(code)
    assert result.returncode == 0, child.tail(result)
    made = pathlib.Path(result.stdout.strip())
    assert made.name.startswith("left-") and made.parent.name.startswith("fp4graph-child-")
    assert not made.parent.exists()
    kept = child.run_python(code, env={"TMPDIR": str(tmp_path)})
    assert kept.returncode == 0, child.tail(kept)
    assert pathlib.Path(kept.stdout.strip()).parent == tmp_path and any(tmp_path.iterdir())


def test_tail_keeps_the_end_of_both_streams() -> None:
    result = child.run_python("import sys; print('o' * 50 + 'END'); sys.stderr.write('e' * 50 + 'ERR'); sys.exit(3)")
    text = child.tail(result, n=5)
    assert text == "rc=3\nstdout:\noEND\n\nstderr:\neeERR"


def _child_module(directory: pathlib.Path, body: str) -> None:
    directory.mkdir(exist_ok=True)
    (directory / "probe_child.py").write_text(body)


def test_run_child_main_returns_the_last_result_line(tmp_path: pathlib.Path) -> None:
    _child_module(tmp_path, "import json, os\n"
                  "def main(raw):\n"
                  "    print('RESULT:' + json.dumps({'first': True}))\n"
                  "    print('RESULT:' + json.dumps({'got': json.loads(raw),"
                  " 'loglevel': os.environ['FLASHINFER_LOGLEVEL']}))\n")
    data = child.run_child_main("probe_child", {"n": 1}, tree=tmp_path, loglevel="2", directory=tmp_path)
    assert data == {"got": {"n": 1}, "loglevel": "2"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param("def main(raw):\n    print('no result')\n", "no result", id="no-result-line"),
        pytest.param("def main(raw):\n    raise SystemExit(4)\n", "rc=4", id="exit-code"),
        pytest.param("import json\ndef main(raw):\n    print('RESULT:' + json.dumps({'crash': 'boom'}))\n",
                     "boom", id="crash-record"),
    ],
)
def test_run_child_main_fails_with_the_childs_output(tmp_path: pathlib.Path, body: str, message: str) -> None:
    _child_module(tmp_path, body)
    with pytest.raises(AssertionError, match=message):
        child.run_child_main("probe_child", {}, tree=tmp_path, directory=tmp_path)


def test_opcheck_failures_lists_errors_and_failed_checks() -> None:
    records = {
        "good": {"opcheck": {"test_schema": "SUCCESS", "test_faketensor": "SUCCESS"}},
        "bad": {"opcheck": {"test_schema": "SUCCESS", "test_aot_dispatch_dynamic": "FAIL: list output"}},
        "broken": {"error": "no such op"},
        "skipped": {"error": "expected"},
    }
    assert child.opcheck_failures(records, skip={"skipped"}) == {
        "bad": {"test_aot_dispatch_dynamic": "FAIL: list output"},
        "broken": "no such op",
    }


def test_run_forked_reports_each_case_by_name() -> None:
    """One child, a fork per case: values, a raised exception, and a fork that ended
    without a result each come back as that case's report; the parent's set-up ran once."""
    code = (
        "import os\nSTARTED = os.getpid()\n"
        "def case(request):\n"
        "    if request['do'] == 'raise':\n        raise ValueError('broken case')\n"
        "    if request['do'] == 'exit':\n        os._exit(3)\n"
        "    return {'parent': os.getppid() == STARTED, 'x': request['x'] * 2}\n"
    )
    reports = child.run_forked(code, {"ok": {"do": "run", "x": 21}, "raises": {"do": "raise"},
                                      "exits": {"do": "exit"}})
    assert list(reports) == ["ok", "raises", "exits"]
    ok, raises, exits = reports.values()
    assert ok.crash is None and ok["x"] == 42 and ok["parent"] is True and "x" in ok
    assert ok.describe().startswith("case 'ok': {") and '"x": 42' in ok.describe()
    assert raises.values == {} and "ValueError: broken case" in (raises.crash or "")
    assert raises.describe().startswith("case 'raises' crashed:\n")
    assert exits.crash == "the fork ended with code 3 and no result"
