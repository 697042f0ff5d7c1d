"""Job three: check the fix without the hardware, and against upstream's own tests.

- :mod:`.simulate`: a CPU-only torch that answers as a CUDA build on a chosen GPU (SM120);
- :mod:`.nvfp4`: the pure-PyTorch NVFP4 / MXFP4 reference the GPU tests compare against;
- :mod:`.suites`: upstream's own test suites from the pinned tag, patched wheel beside
  pristine (it runs them in child interpreters and imports no torch itself).

``simulate`` and ``nvfp4`` are fp4graph's torch importers (install ``fp4graph[verify]``), with
:mod:`fp4graph.integration.checkpoint`, which runs in the sglang venv (pyproject.toml's
import contracts say so).  This ``__init__`` imports nothing.
"""
