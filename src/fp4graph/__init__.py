"""fp4graph: patched FlashInfer and SGLang wheels for piecewise CUDA graphs on SM120.

Three jobs, three rooms, over what they share (:mod:`fp4graph.model`):

- :mod:`fp4graph.wheels`: pinned upstream artifacts plus a patch series -> patched wheels
  and a static index (fetch -> trees -> repack -> build -> index -> publish);
- :mod:`fp4graph.forward`: carry the patches forward and upstream (source repos, rebase,
  pull requests, upstream's checks, drift);
- :mod:`fp4graph.verify`: check the fix without the hardware (the SM120 simulation, the
  NVFP4 reference); :mod:`fp4graph.integration` runs it on a real SM120 GPU.

:mod:`fp4graph.cli` is the command line over all of them, one module per command in
:mod:`fp4graph.commands`.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
