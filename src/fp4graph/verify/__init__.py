"""Job three: check the fix without the hardware.

- :mod:`.simulate`: a CPU-only torch that answers as a CUDA build on a chosen GPU (SM120);
- :mod:`.nvfp4`: the pure-PyTorch NVFP4 / MXFP4 reference the GPU tests compare against.

fp4graph's torch importers (install ``fp4graph[verify]``), with
:mod:`fp4graph.integration.checkpoint`, which runs in the sglang venv (pyproject.toml's
import contracts say so).  This ``__init__`` imports nothing.
"""
