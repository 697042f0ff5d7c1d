"""Run an sglang server, wait until it answers, generate greedily, compare two runs."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

from ..model.errors import Fp4graphError

# Fixed prompts; greedy decoding of each must be the same with piecewise on and off.
PROMPTS: tuple[str, ...] = (
    "The capital of France is",
    "def fibonacci(n):",
    "NVFP4 packs two 4-bit values into one byte, and",
    "1, 2, 3, 4, 5,",
    "Once upon a time",
)


class ServerError(Fp4graphError):
    """The sglang server crashed, never became healthy, or answered wrongly."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: pathlib.Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def http_json(url: str, payload: Any | None = None, timeout: float = 600) -> Any:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"}, method="GET" if data is None else "POST"
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = response.read()
    return json.loads(body) if body.strip() else None


def wait_healthy(
    base_url: str,
    *,
    process: subprocess.Popen[bytes] | None,
    log: pathlib.Path | None,
    timeout: float,
    interval: float = 0.25,
) -> float:
    """Poll ``/health`` until 200; return the seconds waited.  Raise if the process dies."""
    start = time.monotonic()
    while True:
        if process is not None and process.poll() is not None:
            raise ServerError(
                f"sglang exited with code {process.returncode} before it was healthy; "
                f"log {log}:\n{_tail(log) if log else ''}"
            )
        try:
            with urllib.request.urlopen(base_url + "/health", timeout=10) as response:
                if response.status == 200:
                    return time.monotonic() - start
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() - start > timeout:
            raise ServerError(
                f"sglang at {base_url} not healthy after {timeout:.0f} s; log {log}:\n"
                + (_tail(log) if log else "")
            )
        time.sleep(interval)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Completion:
    prompt: str
    text: str
    output_ids: tuple[int, ...] | None


def generate(base_url: str, prompts: Sequence[str], max_new_tokens: int = 32) -> list[Completion]:
    """Greedy completions from sglang's native ``/generate`` (one batched request)."""
    payload = {
        "text": list(prompts),
        "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True},
    }
    try:
        answer = http_json(base_url + "/generate", payload)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ServerError(f"POST {base_url}/generate failed: {exc}") from exc
    items = answer if isinstance(answer, list) else [answer]
    if len(items) != len(prompts):
        raise ServerError(f"/generate returned {len(items)} results for {len(prompts)} prompts")
    out = []
    for prompt, item in zip(prompts, items, strict=True):
        if not isinstance(item, dict) or "text" not in item:
            raise ServerError(f"/generate returned {item!r} for {prompt!r}: no 'text'")
        ids = item.get("output_ids")
        out.append(
            Completion(prompt=prompt, text=item["text"], output_ids=None if ids is None else tuple(ids))
        )
    return out


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Mismatch:
    prompt: str
    on: str
    off: str
    first_divergent_token: int | None


def compare(on: Sequence[Completion], off: Sequence[Completion]) -> list[Mismatch]:
    """Prompts whose greedy output differs (token ids when both runs returned them)."""
    mismatches = []
    for a, b in zip(on, off, strict=True):
        if a.output_ids is not None and b.output_ids is not None:
            if a.output_ids == b.output_ids:
                continue
            first = next(
                (i for i, (x, y) in enumerate(zip(a.output_ids, b.output_ids, strict=False)) if x != y),
                min(len(a.output_ids), len(b.output_ids)),
            )
            mismatches.append(Mismatch(prompt=a.prompt, on=a.text, off=b.text, first_divergent_token=first))
        elif a.text != b.text:
            mismatches.append(Mismatch(prompt=a.prompt, on=a.text, off=b.text, first_divergent_token=None))
    return mismatches


@dataclasses.dataclass(kw_only=True)
class RunningServer:
    base_url: str
    process: subprocess.Popen[bytes]
    log: pathlib.Path
    startup_s: float

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def launched(
    command: Sequence[str],
    *,
    base_url: str,
    log: pathlib.Path,
    timeout: float = 1800,
    env: dict[str, str] | None = None,
) -> Iterator[RunningServer]:
    """Start ``command`` (its own process group), wait for health, stop it on exit."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as log_file:
        log_file.write(("$ " + subprocess.list2cmdline(list(command)) + "\n").encode())
        log_file.flush()
        process = subprocess.Popen(
            list(command),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        try:
            waited = wait_healthy(base_url, process=process, log=log, timeout=timeout)
            yield RunningServer(base_url=base_url, process=process, log=log, startup_s=waited)
            if process.poll() is not None:
                raise ServerError(f"sglang exited with code {process.returncode} during the run; log {log}")
        finally:
            _stop(process)


def _stop(process: subprocess.Popen[bytes], grace: float = 30) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=grace)
