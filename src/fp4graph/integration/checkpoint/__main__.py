"""``python -m fp4graph.integration.checkpoint OUT_DIR --family NAME``: write a tiny ModelOpt
NVFP4 checkpoint; run by the integration workflow in the sglang venv (torch, safetensors,
tokenizers), apart from the fp4graph command line."""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Sequence

from ...model.families import FAMILIES, Size
from . import write_checkpoint


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write a tiny ModelOpt NVFP4 checkpoint")
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--family", choices=sorted(FAMILIES), default="llama")
    parser.add_argument("--size", choices=[s.value for s in Size], default=Size.SERVE.value)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(write_checkpoint(args.out, FAMILIES[args.family], Size(args.size), args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
