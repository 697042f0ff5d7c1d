r"""fp4graph benchmarks: eager overhead, peers' designs, CUDA-graph speed-up, warm-up cost.

    python benchmarks/bench_fp4.py --pristine flashinfer_python-0.6.3-py3-none-any.whl \
        --out benchmarks/results

The patched tree is the installed flashinfer's directory (or ``--patched`` wheel/tree); the
pristine wheel of the same version is ``--pristine``.  Sections (``--sections``), one module
each under ``benchmarks/fp4bench/``:

  warmup     (c) first-call JIT build / ``flashinfer.fp4_warmup`` in fresh processes
  eager      (a) per-call latency of each public fp4 entry point, patched vs pristine, in
             one process (private copies of both trees, interleaved arms)
  decompose  (a') the public functions' code swapped between the trees, and the per-call
             test in its candidate forms
  peers      (p) every project's design around the same fp4_quantize: eager cost, cost in a
             captured CUDA graph, Dynamo trace time of a 32-layer block
  imports    (i) import cost: each design's registration (does it import torch._dynamo?),
             and ``import flashinfer`` patched vs pristine, fresh processes in ABBA order
  block      (b) 32 x [RMSNorm -> fp4_quantize -> GEMM -> add], eager vs compiled + graphs

Below SM100, FlashInfer's fp4 kernels are compiled out (``#if __CUDA_ARCH__ >= 1000``): the
kernels launch and do nothing, so SM90 figures measure host overhead and graph mechanics,
never fp4 math.  The JSON and the README say so on every SM90 figure.

``--smoke`` runs the harness on a CPU (no GPU): tiny rounds, CPU stand-ins for the kernels,
CUDA graphs replaced by plain calls; it checks the script, not speed.  ``--replot`` and
``--report`` redraw the PNGs and print the markdown tables of an earlier results JSON.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
import time

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fp4bench import common, run  # noqa: E402
from fp4bench.block import BLOCK_VARIANTS  # noqa: E402
from fp4bench.common import log  # noqa: E402
from fp4bench.plots import plot_all  # noqa: E402
from fp4bench.report import report  # noqa: E402

SECTIONS = ("warmup", "eager", "decompose", "peers", "imports", "block")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--pristine",
        type=pathlib.Path,
        default=None,
        help="pristine wheel (.whl) or unpacked tree of the same version (required to measure)",
    )
    ap.add_argument(
        "--patched",
        type=pathlib.Path,
        default=None,
        help="patched wheel or tree (default: the installed flashinfer's directory)",
    )
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results")
    ap.add_argument("--sections", default="warmup,eager,decompose,peers,block")
    ap.add_argument("--tokens", default="1,16,256,4096", help="token counts for (a)")
    ap.add_argument("--k", type=int, default=4096, help="K for (a), (a') and (p)")
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--calls", type=int, default=20, help="calls per timed batch")
    ap.add_argument("--ops", default="", help="comma-separated subset of ops for (a)")
    ap.add_argument("--decompose-tokens", default="1,256", help="token counts for (a')")
    ap.add_argument("--peer-tokens", default="1,16,256", help="token counts for (p)")
    ap.add_argument("--import-pairs", type=int, default=10, help="ABBA pairs for (i)")
    ap.add_argument(
        "--import-parts", default="register,flashinfer", help="what (i) measures (comma list)"
    )
    ap.add_argument(
        "--import-fork",
        action="store_true",
        help="(i): time each import in a forked child of a torch-only interpreter",
    )
    ap.add_argument(
        "--import-goal", type=float, default=1.05, help="(i): the patched/pristine goal"
    )
    ap.add_argument(
        "--import-attribution-pairs",
        type=int,
        default=2,
        help="(i): ABBA pairs of -X importtime runs that attribute the difference",
    )
    ap.add_argument("--block-tokens", default="1,8,64")
    ap.add_argument("--block-k", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--block-reps", type=int, default=7)
    ap.add_argument(
        "--block-variants", default=",".join(BLOCK_VARIANTS), help="subset of BLOCK_VARIANTS"
    )
    ap.add_argument(
        "--deadline-s",
        type=float,
        default=0,
        help="stop starting new block work and import pairs after this many seconds (0: none)",
    )
    ap.add_argument("--workdir", type=pathlib.Path, default=None)
    ap.add_argument("--stem-suffix", default="", help="appended to the output file names")
    ap.add_argument("--smoke", action="store_true", help="CPU check of the script (no GPU)")
    ap.add_argument(
        "--replot", type=pathlib.Path, default=None, help="redraw the PNGs of a results JSON, exit"
    )
    ap.add_argument(
        "--report",
        type=pathlib.Path,
        default=None,
        help="print the markdown tables of a results JSON (benchmarks/README.md's), exit",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.replot:
        res = json.loads(args.replot.read_text())
        plot_all(res, args.replot.parent, args.replot.name.removesuffix(".json"))
        return 0
    if args.report:
        print(report(json.loads(args.report.read_text())), end="")
        return 0
    if args.pristine is None:
        ap.error("--pristine is required to measure (not with --replot / --report)")
    sections = [s for s in args.sections.split(",") if s]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise SystemExit(f"unknown section(s) {unknown}: choose from {', '.join(SECTIONS)}")
    common.SMOKE = args.smoke
    if not args.smoke and set(sections) - {"imports"} and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: on a CPU only --sections imports measures (or --smoke)")
    if args.smoke:  # tiny sizes: the smoke checks the script, not speed
        if "warmup" in sections:
            sections.remove("warmup")
        args.k, args.block_k, args.layers, args.block_tokens = 512, 256, 4, "1,8"
        if args.block_variants == ",".join(BLOCK_VARIANTS):  # inductor takes minutes on CPU
            args.block_variants = "eager,eager_graph,piecewise"
    t_start = time.monotonic()
    deadline = t_start + args.deadline_s if args.deadline_s else float("inf")
    work = args.workdir or pathlib.Path(tempfile.mkdtemp(prefix="fp4bench-"))
    work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    r = run.Run(args=args, work=work)
    if "warmup" in sections:  # before this process touches the GPU or imports flashinfer
        run.run_warmup(r)
    stem = run.start(r)
    for section in sections:
        if section == "block":
            run.run_block(r, deadline)
        elif section == "imports":
            run.run_imports(r, deadline)
        elif section != "warmup":
            getattr(run, f"run_{section}")(r)
    r.result["seconds"] = time.monotonic() - t_start
    r.save()
    log(f"wrote {r.out_json} ({r.result['seconds']:.0f} s)")
    plot_all(r.result, args.out, stem)
    (args.out / f"{stem}.md").write_text(report(r.result))
    log(f"wrote {args.out / (stem + '.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
