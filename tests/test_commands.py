"""The command registry: one module per verb in fp4graph.commands, the parser built from it,
and cli.main's terminal (exit codes, the ``Class: message`` line)."""

from __future__ import annotations

import argparse
import pathlib
import pkgutil
import types

import pytest

from fp4graph import cli, commands
from fp4graph.model.errors import ConfigError

HELPERS = {"common"}  # modules of the package that are no command


def test_every_command_module_is_registered_once() -> None:
    modules = {m.name for m in pkgutil.iter_modules(commands.__path__)} - HELPERS
    names = [c.NAME for c in commands.COMMANDS]
    assert sorted(names) == sorted(modules), "a module in fp4graph/commands/ is missing from COMMANDS"
    assert len(set(names)) == len(names)
    for command in commands.COMMANDS:
        assert isinstance(command, types.ModuleType) and command.__name__.endswith(f".{command.NAME}")
        assert command.HELP and command.__doc__ and command.__doc__.startswith(f"``python -m fp4graph {command.NAME}")


def test_the_parser_has_each_command_with_its_own_arguments() -> None:
    top = commands.parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == [c.NAME for c in commands.COMMANDS]
    args = top.parse_args(["pins", "sglang-0.5.9", "--project", "sglang"])
    assert args.func is commands.pins.run and args.stack == "sglang-0.5.9" and args.project == "sglang"
    with pytest.raises(SystemExit):
        top.parse_args(["pins", "sglang-0.5.9", "--stack", "x"])  # wheels' option, not pins'


def _fake_command(result: int | Exception) -> types.ModuleType:
    """A module in the shape of fp4graph/commands/<verb>.py."""
    module = types.ModuleType("fp4graph.commands.hello", "``python -m fp4graph hello``: say hello.")
    module.NAME, module.HELP = "hello", "say hello"  # type: ignore[attr-defined]
    module.add_arguments = lambda p: p.add_argument("--name", default="world")  # type: ignore[attr-defined]

    def run(args: argparse.Namespace) -> int:
        if isinstance(result, Exception):
            raise result
        print(f"hello {args.name}")
        return result

    module.run = run  # type: ignore[attr-defined]
    return module


def test_a_new_command_is_one_module_and_one_entry(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(commands, "COMMANDS", (*commands.COMMANDS, _fake_command(3)))
    assert cli.main(["hello", "--name", "fp4"]) == 3
    assert capsys.readouterr().out == "hello fp4\n"


def test_an_fp4graph_error_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    failing = _fake_command(ConfigError("stacks.toml: no stack 'x'; add it"))
    monkeypatch.setattr(commands, "COMMANDS", (failing,))
    assert cli.main(["hello"]) == 2
    assert capsys.readouterr().err == "ConfigError: stacks.toml: no stack 'x'; add it\n"
    monkeypatch.setattr(commands, "COMMANDS", (_fake_command(RuntimeError("bug")),))
    with pytest.raises(RuntimeError):  # anything else is a bug: its traceback, not a line
        cli.main(["hello"])


def test_stacks_lists_the_catalog_by_torch_pin_for_ci(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """.ci/sessions takes the oldest torch pin from the first line and the stack of the
    newest from the last: ordered by version, not as written (2.10 after 2.9)."""
    sha = "0" * 64
    (tmp_path / "patches").mkdir()
    blocks = []
    for version, torch in (("0.5.11", "2.10.0"), ("0.5.9", "2.9.1")):
        blocks.append(f'[[artifact]]\nproject = "sglang"\nversion = "{version}"\nrevision = 1\n'
                      f'files = [{{ filename = "sglang-{version}-py3-none-any.whl", sha256 = "{sha}" }}]\n')
        blocks.append(f'[[stack]]\nname = "sglang-{version}"\nartifacts = ["sglang=={version}"]\ntorch = "{torch}"\n')
    blocks.append('[[stack]]\nname = "no-torch"\nartifacts = ["sglang==0.5.9"]\n')
    (tmp_path / "patches" / "stacks.toml").write_text("\n".join(blocks))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["stacks", "--torch"]) == 0
    assert capsys.readouterr().out == "sglang-0.5.9 2.9.1\nsglang-0.5.11 2.10.0\n"
    assert cli.main(["stacks", "--sglang"]) == 0
    assert capsys.readouterr().out == "sglang-0.5.11\nsglang-0.5.9\nno-torch\n"
    # --patched: only the stacks whose project has a series (gpu, bench and suites measure
    # the patched flashinfer; a stack that serves it pristine has nothing to compare).
    series_dir = tmp_path / "patches" / "sglang" / "0.5.9"
    series_dir.mkdir(parents=True)
    (series_dir / "series").write_text("")
    assert cli.main(["stacks", "--torch", "--patched", "sglang"]) == 0
    assert capsys.readouterr().out == "sglang-0.5.9 2.9.1\n"
