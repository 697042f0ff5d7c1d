"""Launch / health / greedy generation / on-vs-off comparison, against a fake sglang server."""

from __future__ import annotations

import pathlib
import sys

import pytest

from fp4graph.integration import flags, server

FAKE = pathlib.Path(__file__).parent / "fake_sglang_server.py"


def _launch(tmp: pathlib.Path, name: str, *extra: str, timeout: float = 60):
    port = server.free_port()
    return server.launched(
        [sys.executable, str(FAKE), str(port), *extra],
        base_url=f"http://127.0.0.1:{port}",
        log=tmp / f"{name}.log",
        timeout=timeout,
    )


def test_same_greedy_output_passes(tmp_path: pathlib.Path) -> None:
    runs = {}
    for name in ("off", "on"):
        with _launch(tmp_path, name, "--slow-start", "0.5") as running:
            runs[name] = server.generate(running.base_url, server.PROMPTS, max_new_tokens=8)
            assert flags.PIECEWISE_CAPTURED_MARKER in running.log_text()
            pid = running.process.pid
        assert running.process.poll() is not None, f"server {pid} still running after the block"
    assert [len(c.output_ids or ()) for c in runs["on"]] == [8] * len(server.PROMPTS)
    assert server.compare(runs["on"], runs["off"]) == []


def test_different_greedy_output_is_reported(tmp_path: pathlib.Path) -> None:
    with _launch(tmp_path, "off") as running:
        off = server.generate(running.base_url, server.PROMPTS)
    with _launch(tmp_path, "on", "--variant", "1") as running:
        on = server.generate(running.base_url, server.PROMPTS)
    mismatches = server.compare(on, off)
    assert [m.prompt for m in mismatches] == [server.PROMPTS[1]]
    assert mismatches[0].first_divergent_token == 0


def test_text_only_comparison() -> None:
    a = [server.Completion(prompt="p", text="x", output_ids=None)]
    b = [server.Completion(prompt="p", text="y", output_ids=(1,))]
    assert server.compare(a, b)[0].first_divergent_token is None
    assert server.compare(a, a) == []


def test_crash_before_healthy_shows_the_log(tmp_path: pathlib.Path) -> None:
    with pytest.raises(server.ServerError, match=r"exited with code 1 before it was healthy(.|\n)*Unsupported"):
        with _launch(tmp_path, "crash", "--crash"):
            pass


def test_never_healthy_times_out(tmp_path: pathlib.Path) -> None:
    with pytest.raises(server.ServerError, match="not healthy after 1 s"):
        with _launch(tmp_path, "slow", "--slow-start", "30", timeout=1):
            pass


def test_generate_against_nothing_fails_clearly() -> None:
    with pytest.raises(server.ServerError, match="/generate failed"):
        server.generate(f"http://127.0.0.1:{server.free_port()}", ["x"])
