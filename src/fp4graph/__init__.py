"""fp4graph: patched FlashInfer and SGLang wheels for piecewise CUDA graphs on SM120.

The engine turns pinned upstream artifacts plus a patch series into patched
wheels and a static package index:

    stacks (patches/stacks.toml) -> fetch (sha256-checked cache)
      -> trees (unpack + apply the series) -> repack (+fp4graph.N)
      -> build (wheels/, SHA256SUMS, manifest.json, simple/) -> publish
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
