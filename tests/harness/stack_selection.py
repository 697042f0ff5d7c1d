"""``pytest --stack NAME``: only the tests of patches/stacks.toml's stack NAME (repeatable).

``nox -s tracing`` selects each torch pin's stacks so. A test belongs to a stack when its
parametrize id names one of the stack's upstream versions as a whole ``-``-separated part:
flashinfer ``0.6.1`` selects ``[0.6.1-sm120]`` but not ``[0.6.12]``, sglang ``0.5.12``
selects ``[sglang-0.5.12-patched-glm5]`` but not ``[sglang-0.5.12.post1-patched-glm5]``
(pytest's ``-k`` matches substrings: it did both). A stack that no collected test names fails
the run at collection, as an unknown stack does, and so does a stack whose every selected
test skipped (:class:`SkippedStacks`): a session never passes having traced nothing of one of
its stacks. ``-k`` and ``-m`` narrow what this keeps.
"""

from __future__ import annotations

import pathlib
from collections.abc import Collection, Iterable, Mapping

import pytest

from fp4graph.model import stacks
from fp4graph.model.errors import ConfigError

REPO = pathlib.Path(__file__).resolve().parents[2]
OPTION = "--stack"


def id_names(test_id: str, versions: Collection[str]) -> bool:
    """Whether the parametrize id ``test_id`` names one of ``versions`` as a whole part."""
    return any(part in versions for part in test_id.split("-"))


def stack_versions(catalog: stacks.Catalog, names: Iterable[str]) -> dict[str, set[str]]:
    """Each stack of ``names`` -> its upstream versions (the parts its tests' ids name)."""
    return {name: set(catalog.versions(catalog.stack(name)).values()) for name in names}


def split(ids: Iterable[str | None], versions: Mapping[str, Collection[str]]) -> tuple[list[bool], list[str]]:
    """(for each id, whether it names a stack of ``versions``; the stacks no id names).
    ``None`` stands for a test that is not parametrized (it names no stack)."""
    kept: list[bool] = []
    named: set[str] = set()
    for test_id in ids:
        hits = [name for name, wanted in versions.items() if test_id is not None and id_names(test_id, wanted)]
        named.update(hits)
        kept.append(bool(hits))
    return kept, [name for name in versions if name not in named]


def add_option(parser: pytest.Parser) -> None:
    parser.addoption(OPTION, action="append", default=[], metavar="NAME",
                     help="only the tests whose parametrize id names a version of stack NAME "
                          "(patches/stacks.toml; repeatable; nox -s tracing)")


def select(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the items of the ``--stack`` stacks (all where none is given). An unknown stack,
    or one no item names, is a collection error and nothing runs (a failed collect report:
    pytest-xdist's workers pass it on, where a raised error would lose its message)."""
    names: list[str] = config.getoption("stack")
    if not names:
        return
    try:
        versions = stack_versions(stacks.load(REPO / "patches" / "stacks.toml"), names)
    except ConfigError as error:
        _fail(config, items, str(error))
        return
    callspecs = [getattr(item, "callspec", None) for item in items]
    kept, unnamed = split((c.id if c is not None else None for c in callspecs), versions)
    if unnamed:
        _fail(config, items, f"no collected test names stack(s) {', '.join(unnamed)} ("
              + "; ".join(f"{n}: versions {', '.join(sorted(versions[n]))}" for n in unnamed)
              + f") among the {len(items)} collected: the run would trace nothing of them")
        return
    config.hook.pytest_deselected(items=[item for item, keep in zip(items, kept, strict=True) if not keep])
    items[:] = [item for item, keep in zip(items, kept, strict=True) if keep]


def _fail(config: pytest.Config, items: list[pytest.Item], message: str) -> None:
    report = pytest.CollectReport(nodeid="", outcome="failed", longrepr=f"{OPTION}: {message}", result=[])
    config.hook.pytest_collectreport(report=report)
    config.hook.pytest_deselected(items=list(items))
    items.clear()


def parametrize_id(nodeid: str) -> str | None:
    """``path::test[ID]`` -> ``ID``; None for a test that is not parametrized."""
    return nodeid[nodeid.index("[") + 1:-1] if nodeid.endswith("]") and "[" in nodeid else None


class SkippedStacks:
    """Where tests report (the run's only process, or pytest-xdist's controller), fails the run
    when a ``--stack`` stack had tests and every one of them skipped."""

    def __init__(self, versions: Mapping[str, Collection[str]]) -> None:
        self.versions = versions
        self.seen: dict[str, int] = {}
        self.ran: set[str] = set()

    def silent(self) -> list[str]:
        return [name for name in self.seen if name not in self.ran]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        test_id = parametrize_id(report.nodeid)
        ran = report.failed or (report.when == "call" and not report.skipped)
        for name, wanted in self.versions.items():
            if test_id is not None and id_names(test_id, wanted):
                self.seen[name] = self.seen.get(name, 0) + (report.when == "setup")
                if ran:
                    self.ran.add(name)

    @pytest.hookimpl(tryfirst=True)  # before the terminal reporter writes the summary
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.silent() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        for name in self.silent():
            terminalreporter.write_line(
                f"{OPTION} {name}: all {self.seen[name]} of its selected tests skipped: the run "
                "traced nothing of it (-ra lists the skip reasons)", red=True)


def configure(config: pytest.Config) -> None:
    """Watch the ``--stack`` stacks' outcomes (not in a pytest-xdist worker: its controller
    sees every report)."""
    names: list[str] = config.getoption("stack")
    if not names or hasattr(config, "workerinput"):
        return
    try:
        versions = stack_versions(stacks.load(REPO / "patches" / "stacks.toml"), names)
    except ConfigError:
        return  # select() fails the collection, naming the stack
    config.pluginmanager.register(SkippedStacks(versions), "fp4graph-skipped-stacks")
