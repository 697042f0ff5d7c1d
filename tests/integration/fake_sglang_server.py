"""A stand-in for ``python -m sglang.launch_server``: /health and a greedy /generate.

Usage: ``fake_sglang_server.py PORT [--variant N] [--crash] [--slow-start S]``.  The reply to
a prompt is a pure function of the prompt (and ``--variant``, which changes the reply to the
second prompt: a different "piecewise" result), shaped like sglang's /generate answer.
"""

from __future__ import annotations

import argparse
import http.server
import json
import sys
import time


def reply(prompt: str, max_new_tokens: int, variant: int, index: int) -> dict[str, object]:
    ids = [(ord(c) + (variant if index == 1 else 0)) % 256 for c in prompt][:max_new_tokens]
    return {
        "text": "".join(chr(32 + i % 90) for i in ids),
        "output_ids": ids,
        "meta_info": {"id": f"req-{index}", "finish_reason": {"type": "length"}},
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--variant", type=int, default=0)
    parser.add_argument("--crash", action="store_true")
    parser.add_argument("--slow-start", type=float, default=0.0)
    args = parser.parse_args()
    print("loading weights", flush=True)
    if args.crash:
        print("torch._dynamo.exc.Unsupported: Attempted to call function marked as skipped", flush=True)
        return 1
    time.sleep(args.slow_start)
    print("Capture piecewise CUDA graph end. Time elapsed: 1.00 s.", flush=True)

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
            out = [reply(t, params["max_new_tokens"], args.variant, i) for i, t in enumerate(texts)]
            self._send(200, out if isinstance(body["text"], list) else out[0])

    http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
