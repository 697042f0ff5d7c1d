"""Stands in for the interpreters of an integration run (base python and the venvs' python).

Pass it as ``--python``: ``-m venv DIR`` makes ``DIR/bin/python`` a launcher of this
script, so every later command of the run comes here and is logged (one JSON line each,
``FAKE_PYTHON_LOG``) with the venv that ran it:

- ``-m pip install ...``: nothing installed; ``transformers==X`` is remembered per venv;
  ``-m pip check``: no broken requirements;
- ``-c <probe>``: the torch device probe answers SM120 GPUs (``FAKE_GPUS``, default 1); the
  transformers probe answers the venv's version (``FAKE_TRANSFORMERS``, default 4.57.1, the
  pin of sglang 0.5.9, or what pip installed over it); the install's distribution probe
  answers none; an import of the install's smoke succeeds, unless its code holds the key of
  ``FAKE_IMPORT_ERRORS`` (JSON ``{"import flashinfer": "RuntimeError: ..."}``): then it
  prints that error and exits 1;
- ``-m fp4graph.integration.checkpoint OUT --family F``: writes only ``OUT/config.json``;
- ``-m sglang.launch_server --help``: a usage line; ``-m sglang.launch_server ...``:
  fake_sglang_server.py ``--launch-server``;
- ``-m sglang.bench_serving ...``: one JSONL record in ``--output-file``.
"""

from __future__ import annotations

import json
import os
import pathlib
import stat
import sys

HERE = pathlib.Path(__file__).resolve().parent
STATE = "fake-venv.json"


def _venv() -> pathlib.Path | None:
    exe = pathlib.Path(sys.argv[0]).resolve()
    return exe.parents[1] if exe.parent.name == "bin" else None


def _state(venv: pathlib.Path | None) -> dict[str, str]:
    if venv is None or not (venv / STATE).is_file():
        return {}
    data: dict[str, str] = json.loads((venv / STATE).read_text())
    return data


def _log(argv: list[str]) -> None:
    path = os.environ.get("FAKE_PYTHON_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"venv": str(_venv()), "argv": argv}) + "\n")


def make_venv(target: pathlib.Path) -> None:
    (target / "bin").mkdir(parents=True, exist_ok=True)
    exe = target / "bin" / "python"
    exe.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(HERE)!r})\n"
        "import fake_python\nsys.exit(fake_python.main())\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    (target / STATE).write_text(json.dumps({"transformers": os.environ.get("FAKE_TRANSFORMERS", "4.57.1")}))


def pip(argv: list[str]) -> int:
    venv = _venv()
    state = _state(venv)
    for arg in argv:
        if arg.startswith("transformers=="):
            state["transformers"] = arg.split("==", 1)[1]
        elif "==" in arg and not arg.startswith("-"):  # a pin installed: the probe lists it
            name, _, version = arg.partition("==")
            state[f"dist:{name.lower().replace('_', '-')}"] = version
    if venv is not None:
        (venv / STATE).write_text(json.dumps(state))
    return 0


def probe(code: str) -> int:
    for key, error in json.loads(os.environ.get("FAKE_IMPORT_ERRORS", "{}")).items():
        if key in code:
            print(f"Traceback (most recent call last):\n  File \"<string>\", line 1\n{error}", file=sys.stderr)
            return 1
    if '"distributions"' in code:  # fp4graph.install.stack's probe
        dists = {k[5:]: v for k, v in _state(_venv()).items() if k.startswith("dist:")}
        print(json.dumps({"distributions": dists, "environment": {"python_version": "3.11"}}))
    elif "import flashinfer" in code or "from flashinfer" in code or "sglang.srt" in code or "sgl_kernel" in code:
        print("imported")
    elif "transformers" in code:
        print(_state(_venv()).get("transformers", "4.57.1"))
    elif "torch.cuda" in code:
        gpus = [["NVIDIA RTX PRO 6000 Blackwell Server Edition", [12, 0]]] * int(os.environ.get("FAKE_GPUS", "1"))
        print(json.dumps({"torch": "2.9.1+cu128", "cuda": "12.8", "gpus": gpus}))
    else:
        print(f"fake_python: unknown probe {code!r}", file=sys.stderr)
        return 2
    return 0


def checkpoint(argv: list[str]) -> int:
    sys.path.insert(0, str(HERE.parents[1] / "src"))
    from fp4graph.model.families import FAMILIES

    out = pathlib.Path(argv[0])
    family = FAMILIES[argv[argv.index("--family") + 1]]
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({"architectures": [family.architecture]}))
    return 0


def bench(argv: list[str]) -> int:
    out = pathlib.Path(argv[argv.index("--output-file") + 1])
    level = int(argv[argv.index("--max-concurrency") + 1])
    record = {
        "completed": int(argv[argv.index("--num-prompts") + 1]),
        "output_throughput": 100.0 * level, "total_throughput": 500.0 * level,
        "mean_ttft_ms": 10.0, "median_ttft_ms": 9.0, "mean_itl_ms": 2.0, "median_itl_ms": 2.0,
    }
    with out.open("a") as f:
        f.write(json.dumps(record) + "\n")
    print("============ Serving Benchmark Result ============")
    return 0


def main() -> int:
    argv = sys.argv[1:]
    _log(argv)
    if argv[:2] == ["-m", "venv"]:
        make_venv(pathlib.Path(argv[2]))
        return 0
    if argv[:2] == ["-m", "pip"]:
        return pip(argv[2:])
    if argv[:1] == ["-c"]:
        return probe(argv[1])
    if argv[:2] == ["-m", "fp4graph.integration.checkpoint"]:
        return checkpoint(argv[2:])
    if argv[:2] == ["-m", "sglang.launch_server"] and "--help" in argv:
        print("usage: launch_server.py [-h] --model-path MODEL_PATH ...")
        return 0
    if argv[:2] == ["-m", "sglang.launch_server"]:
        server = str(HERE / "fake_sglang_server.py")
        os.execv(sys.executable, [sys.executable, server, "--launch-server", *argv[2:]])
    if argv[:2] == ["-m", "sglang.bench_serving"]:
        return bench(argv[2:])
    print(f"fake_python: unexpected {argv!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
