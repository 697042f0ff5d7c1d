"""The FlashInfer fp4 module kinds sglang's patched warm-up requests on SM12x, per release.

One table, read by the kernels build (its default modules: ``wheels.kernels.targets``), the
whole-model simulation that checks it against sglang's own code
(tests/models/test_fp4_warmup_models.py) and the JIT build benchmark
(benchmarks/jit_build.py).  Standard library only: the benchmark imports it from src/.
"""

from __future__ import annotations

# The kind ``--moe-runner-backend flashinfer_cutlass`` adds (minutes to build).
MOE_CUTLASS = "moe_cutlass"

# The kinds the warm-up requests with the default server, for every model family
# (``fp4_utils.flashinfer_fp4_modules``): NVFP4 linear layers quantize with FlashInfer's
# fp4_quantize; the fp4 GEMM runner backend "flashinfer_cutlass" (0.5.9's default) and
# "auto" before 0.5.10 run the CUTLASS fp4 GEMM, while 0.5.10+ resolve "auto" to cuDNN on
# SM120, no JIT module; MoE layers on the default runner "auto" run sgl_kernel.  A new
# sglang stack needs a row: the kernels build and the simulation refuse one without.
DEFAULT_KINDS: dict[str, tuple[str, ...]] = {
    "0.5.8": ("quantization", "gemm_cutlass"),
    "0.5.8.post1": ("quantization", "gemm_cutlass"),
    "0.5.9": ("quantization", "gemm_cutlass"),
    "0.5.10": ("quantization",),
    "0.5.10.post1": ("quantization",),
    "0.5.11": ("quantization",),
    # No fp4-warmup in its series (sglang's own fp4 op): what its pristine start builds.
    "0.5.12": ("quantization",),
    "0.5.12.post1": ("quantization",),
}


def requested(sglang: str, moe_runner_backend: str = "auto") -> tuple[str, ...]:
    """The kinds the warm-up of sglang ``sglang`` requests for a model on
    ``moe_runner_backend``; KeyError naming this table for a release it lacks."""
    if sglang not in DEFAULT_KINDS:
        raise KeyError(f"sglang {sglang} has no row in fp4graph.model.warmup.DEFAULT_KINDS: add the "
                       "fp4 kinds its warm-up requests (docs/adding-a-release.md)")
    extra = (MOE_CUTLASS,) if moe_runner_backend == "flashinfer_cutlass" else ()
    return DEFAULT_KINDS[sglang] + extra
