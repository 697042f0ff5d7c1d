"""A stand-in for ``python -m sglang.launch_server``: /health and a greedy /generate.

Two command lines:

- ``fake_sglang_server.py PORT [--variant N] [--crash] [--slow-start S]``;
- ``fake_sglang_server.py --launch-server <launch_server arguments>``: what the integration
  run passes to sglang (``--port``, ``--model-path``, the piecewise flags ...).  Piecewise
  graphs count as captured when the arguments turn them on the way the pinned release
  does (``FAKE_SGLANG_VERSION``: opt-in up to 0.5.9, default on from 0.5.10).  Faults for
  chosen cells come from ``FAKE_SGLANG_FAULTS``: a JSON list of
  ``{"match": [substrings of the joined arguments], "fault": "crash" | "differ" | "no-capture"}``.

The reply to a prompt is a pure function of the prompt (and ``--variant``, which changes
the reply to the second prompt: a different "piecewise" result), shaped like sglang's
/generate answer.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import sys
import time

CAPTURED = "Capture piecewise CUDA graph end. Time elapsed: 1.00 s."


def reply(prompt: str, max_new_tokens: int, variant: int, index: int) -> dict[str, object]:
    ids = [(ord(c) + (variant if index == 1 else 0)) % 256 for c in prompt][:max_new_tokens]
    return {
        "text": "".join(chr(32 + i % 90) for i in ids),
        "output_ids": ids,
        "meta_info": {"id": f"req-{index}", "finish_reason": {"type": "length"}},
    }


def serve(port: int, *, variant: int, captured: bool, crash: bool, slow_start: float) -> int:
    print("loading weights", flush=True)
    if crash:
        print("torch._dynamo.exc.Unsupported: Attempted to call function marked as skipped", flush=True)
        return 1
    time.sleep(slow_start)
    if captured:
        print(CAPTURED, flush=True)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def _send(self, code: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._send(200, {}) if self.path == "/health" else self._send(404, {"error": self.path})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            params = body["sampling_params"]
            assert params["temperature"] == 0.0, params
            texts = body["text"] if isinstance(body["text"], list) else [body["text"]]
            out = [reply(t, params["max_new_tokens"], variant, i) for i, t in enumerate(texts)]
            self._send(200, out if isinstance(body["text"], list) else out[0])

    http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
    return 0


def piecewise_on(argv: list[str], version: str) -> bool:
    major_minor = tuple(int(x) for x in version.split(".")[:3] if x.isdigit())
    if major_minor < (0, 5, 10):
        return "--enable-piecewise-cuda-graph" in argv
    return "--disable-piecewise-cuda-graph" not in argv


def launch_server(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model-path", required=True)
    known, _ = parser.parse_known_args(argv)
    joined = " ".join(argv)
    faults = {
        f["fault"]
        for f in json.loads(os.environ.get("FAKE_SGLANG_FAULTS", "[]"))
        if all(m in joined for m in f["match"])
    }
    captured = piecewise_on(argv, os.environ.get("FAKE_SGLANG_VERSION", "0.5.9")) and "no-capture" not in faults
    print("server_args=" + joined, flush=True)
    return serve(known.port, variant=1 if "differ" in faults else 0, captured=captured,
                 crash="crash" in faults, slow_start=0.0)


def main() -> int:
    if sys.argv[1:2] == ["--launch-server"]:
        return launch_server(sys.argv[2:])
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--variant", type=int, default=0)
    parser.add_argument("--crash", action="store_true")
    parser.add_argument("--slow-start", type=float, default=0.0)
    args = parser.parse_args()
    return serve(args.port, variant=args.variant, captured=True, crash=args.crash, slow_start=args.slow_start)


if __name__ == "__main__":
    sys.exit(main())
