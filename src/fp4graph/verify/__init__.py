"""Job three: check the fix without the hardware.

- :mod:`.simulate`: a CPU-only torch that answers as a CUDA build on a chosen GPU (SM120);
- :mod:`.nvfp4`: the pure-PyTorch NVFP4 / MXFP4 reference the GPU tests compare against.

The only modules of fp4graph that import torch (install ``fp4graph[verify]``).  This
package's ``__init__`` imports nothing, so ``import fp4graph.verify`` stays cheap.
"""
