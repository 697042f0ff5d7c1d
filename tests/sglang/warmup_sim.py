"""Child side: which FlashInfer fp4 JIT modules an NVFP4 model needs, on a simulated SM120.

Imported in the child interpreter ``run_python`` starts (sglang and flashinfer
trees first on the path), after :func:`sgsim.prepare`.  Two records per model kind:

* ``requested``: what the patched piecewise warm-up asks for and builds, i.e.
  sglang's ``flashinfer_fp4_modules(model)`` and the JIT modules
  ``warmup_flashinfer_fp4(device, model)`` builds through ``flashinfer.fp4_warmup``;
* ``eager``: the JIT modules the model's eager forward builds, as in a server with
  piecewise CUDA graph off (pristine sglang and flashinfer).

The model kinds are sglang's own NVFP4 layers: ModelOpt fp4 linear layers
(``ModelOptFp4LinearMethod``, weights prepared by its ``process_weights_after_loading``)
and, for the MoE kinds, a layer holding ``ModelOptNvFp4FusedMoEMethod``.  sglang's
backends are set the way its server sets them: ``initialize_fp4_gemm_config`` and
``initialize_moe_config`` with the release's ``ServerArgs`` defaults and the MoE runner
backend of the case.

Stand-ins (nothing of sglang's layer / quantization code nor FlashInfer's Python):

1. the SM120 device (``fp4graph.simulate``) and sgsim's import shims (torchvision,
   sgl_kernel, flashinfer.comm);
2. FlashInfer's JIT build and load (``fi_child.stub_jit``: no nvcc, no dlopen; the
   name of every module built is recorded; kernels are no-ops);
3. cuDNN's Python frontend (``fi_child.stub_cudnn``): its graphs build and execute
   nothing; FlashInfer's cuDNN fp4 GEMM path around them runs;
4. the CUDA runtime's current stream (``torch.cuda.current_stream``, which the cuDNN
   path hands to cuDNN): a stream object with a null handle;
5. fake tensors: sglang's custom ops (``sglang.fp4_gemm``, ``sglang.flashinfer_fp4_quantize``)
   would run their fake under FakeTensorMode; inside :func:`real_op_bodies` their fake
   runs the op's own Python body instead, as the eager server does on a GPU.

The MoE layers' eager forward is not run here (it needs a whole FusedMoE layer and
its parallel state: tests/models); for them only ``requested`` is recorded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import tempfile
import traceback
import types
from collections.abc import Iterator
from typing import Any

_REAL_BODIES = {"on": False}


def install_real_op_bodies() -> None:
    """Let sglang's custom ops run their Python body on fake tensors when asked.

    Wraps ``direct_register_custom_op`` (every sglang op registration goes through
    it), before the fp4 ops register, so that each op's fake calls the op's own
    function while :func:`real_op_bodies` is active."""
    from sglang.srt.utils import common

    original = common.direct_register_custom_op

    def register(op_name: str, op_func: Any, mutates_args: Any, fake_impl: Any = None, target_lib: Any = None) -> Any:
        if fake_impl is not None:
            fake = fake_impl

            def fake_impl(*args: Any, **kwargs: Any) -> Any:
                return (op_func if _REAL_BODIES["on"] else fake)(*args, **kwargs)

        return original(op_name, op_func, mutates_args, fake_impl, target_lib)

    common.direct_register_custom_op = register


@contextlib.contextmanager
def real_op_bodies() -> Iterator[None]:
    _REAL_BODIES["on"] = True
    try:
        yield
    finally:
        _REAL_BODIES["on"] = False


def server_args(**overrides: Any) -> types.SimpleNamespace:
    """The release's ``ServerArgs`` defaults (no model needed), with ``overrides``."""
    from sglang.srt.server_args import ServerArgs

    values: dict[str, Any] = {}
    for f in dataclasses.fields(ServerArgs):
        if f.default is not dataclasses.MISSING:
            values[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            values[f.name] = f.default_factory()
    values.update(overrides)
    return types.SimpleNamespace(**values)


def configure(moe_runner_backend: str) -> dict[str, str]:
    """Set sglang's fp4 GEMM and MoE backends as its server does for a ModelOpt NVFP4 model."""
    from sglang.srt.layers.moe import utils as moe_utils
    from sglang.srt.layers.quantization import fp4_utils

    args = server_args(quantization="modelopt_fp4", moe_runner_backend=moe_runner_backend)
    fp4_utils.FP4_GEMM_RUNNER_BACKEND = None
    fp4_utils.initialize_fp4_gemm_config(args)
    moe_utils.initialize_moe_config(args)
    return {
        "fp4_gemm_runner_backend": fp4_utils.get_fp4_gemm_runner_backend().value,
        "moe_runner_backend": moe_utils.get_moe_runner_backend().value,
    }


class Model(__import__("torch").nn.Module):
    """Two ModelOpt NVFP4 linear layers (and, for MoE kinds, a ModelOpt NVFP4 MoE layer)."""

    def __init__(self, hidden: int, moe: bool) -> None:
        import sgsim

        super().__init__()
        self.qkv_proj = sgsim.fp4_linear(hidden, 2 * hidden)
        self.o_proj = sgsim.fp4_linear(2 * hidden, hidden)
        if moe:
            from sglang.srt.layers.quantization.modelopt_quant import (
                ModelOptFp4Config,
                ModelOptNvFp4FusedMoEMethod,
            )

            config = ModelOptFp4Config(
                is_checkpoint_nvfp4_serialized=True,
                kv_cache_quant_algo=None,
                group_size=16,
                exclude_modules=[],
            )
            self.experts = __import__("torch").nn.Module()
            self.experts.quant_method = ModelOptNvFp4FusedMoEMethod(config)

    def forward(self, x: Any) -> Any:
        h = self.qkv_proj.quant_method.apply(self.qkv_proj, x)
        return self.o_proj.quant_method.apply(self.o_proj, h)


def _clear_getters(built: list[str]) -> None:
    import fi_child

    fi_child._clear_module_getters()
    del built[:]


def run(kinds: list[dict[str, Any]], *, patched: bool) -> dict[str, Any]:
    """One record per model kind ({"name", "moe", "moe_runner_backend"})."""
    import fi_child
    import sgsim
    import torch

    install_real_op_bodies()
    built = fi_child.stub_jit(tempfile.mkdtemp(prefix="fp4graph-warmup-"))
    fi_child.stub_cudnn()
    torch.cuda.current_stream = lambda device=None: types.SimpleNamespace(cuda_stream=0)
    from sglang.srt.layers.quantization import fp4_utils

    out: dict[str, Any] = {}
    for kind in kinds:
        rec: dict[str, Any] = {"backends": configure(kind["moe_runner_backend"])}
        with sgsim.fake_mode():
            _clear_getters(built)
            model = Model(256, kind["moe"])
            rec["at_load"] = sorted(set(built))
            if patched:
                _clear_getters(built)
                rec["kinds"] = fp4_utils.flashinfer_fp4_modules(model)
                rec["warmed"] = fp4_utils.warmup_flashinfer_fp4(torch.device("cuda", 0), model)
                rec["requested"] = list(built)
            _clear_getters(built)
            x = torch.empty(8, 256, dtype=torch.bfloat16, device="cuda")
            try:
                with real_op_bodies():
                    model(x)
                rec["eager"] = sorted(set(built))
            except Exception as exc:
                rec["eager_error"] = f"{type(exc).__name__}: {str(exc)[:800]}"
                rec["eager_traceback"] = traceback.format_exc()[-3000:]
        out[kind["name"]] = rec
    sys.stdout.flush()
    return out
