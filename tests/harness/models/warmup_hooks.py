"""Observation hooks for the whole-model warm-up test (test_fp4_warmup_models.py).

Installed in tests/models' child interpreter around its whole-model simulation
(modelsim.py, whose stand-ins are listed there):

* :func:`install_real_op_bodies` (before sglang is imported) and :func:`real_op_bodies`:
  under FakeTensorMode sglang's custom ops (``sglang.fp4_gemm``,
  ``sglang.flashinfer_fp4_quantize``, ...) would run their fake; inside
  :func:`real_op_bodies` their fake runs the op's own Python body instead, as the eager
  server does on a GPU, so that the FlashInfer calls inside them build their JIT
  modules (recorded by the JIT stand-in) -- what a server with piecewise off builds;
* :func:`observe_model_warmup`: records each ``warmup_flashinfer_fp4(device, model)``
  call of the (patched) piecewise runner: the kinds it asks for and the JIT modules
  it builds; sets sglang's fp4 GEMM backend from the server args as its Scheduler does
  (``initialize_fp4_gemm_config``), which modelsim, building the runner without a
  Scheduler, skips; and stands in for cuDNN's Python frontend
  (``fi_child.stub_cudnn``: graphs that build and execute nothing) so that the cuDNN
  fp4 GEMM, sglang 0.5.10+'s SM120 default, runs FlashInfer's Python around it;
* :func:`read_alpha_on_device` (pristine FlashInfer 0.6.1 only): 0.6.1's cuDNN fp4
  requirement check passes the ``alpha`` tensor where its plan cache wants
  ``alpha is not None`` (fixed upstream in flashinfer#2450, 0.6.3; the 0.6.1 series
  backports it, Topic: cudnn-fp4-plan-key), so the plan builder
  evaluates ``bool(alpha)``: a read of device memory, which a fake tensor cannot answer.
  The stand-in answers it as the GPU does (alpha = 1 / (input_scale * weight_scale_2)
  > 0: ``True``); it builds no JIT module either way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

_REAL_BODIES = {"on": False}


def install_real_op_bodies() -> None:
    """Let sglang's custom ops run their Python body on fake tensors when asked.

    Wraps ``torch.library.Library.impl`` / ``_register_fake`` (what sglang's
    ``direct_register_custom_op`` registers through) for the ``sglang`` namespace, so
    that each op's fake calls the op's own function while :func:`real_op_bodies` is
    active.  Needs only torch: install it before sglang is imported."""
    import torch.library

    Library = torch.library.Library
    if getattr(Library, "_fp4graph_real_bodies", False):
        return
    bodies: dict[str, Any] = {}
    impl, register_fake = Library.impl, Library._register_fake

    def impl_(self: Any, op_name: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if self.ns == "sglang" and isinstance(op_name, str) and callable(fn):
            bodies[op_name] = fn
        return impl(self, op_name, fn, *args, **kwargs)

    def register_fake_(self: Any, op_name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if self.ns == "sglang" and isinstance(op_name, str):
            fake = fn

            def fn(*a: Any, **k: Any) -> Any:
                body = bodies.get(op_name)
                return (body if _REAL_BODIES["on"] and body is not None else fake)(*a, **k)

        return register_fake(self, op_name, fn, *args, **kwargs)

    Library.impl = impl_  # type: ignore[method-assign]
    Library._register_fake = register_fake_  # type: ignore[method-assign]
    Library._fp4graph_real_bodies = True  # type: ignore[attr-defined]


@contextlib.contextmanager
def real_op_bodies() -> Iterator[None]:
    _REAL_BODIES["on"] = True
    try:
        yield
    finally:
        _REAL_BODIES["on"] = False


def read_alpha_on_device() -> None:
    """See the module docstring: ``bool(alpha)`` as a GPU answers it, where FlashInfer's
    cuDNN fp4 plan builder is handed the tensor itself (0.6.1)."""
    import fi_child
    import torch

    gemm_base = fi_child.gemm_module()
    build = getattr(gemm_base, "create_cudnn_execution_plans_fp4_gemm", None)
    if build is None or getattr(build, "_fp4graph_alpha", False):
        return

    def create_cudnn_execution_plans_fp4_gemm(*args: Any) -> Any:
        alpha_at = 12  # (..., block_size, device, alpha_is_not_none, use_nvfp4)
        if len(args) > alpha_at and isinstance(args[alpha_at], torch.Tensor):
            args = (*args[:alpha_at], True, *args[alpha_at + 1 :])
        return build(*args)

    create_cudnn_execution_plans_fp4_gemm._fp4graph_alpha = True  # type: ignore[attr-defined]
    gemm_base.create_cudnn_execution_plans_fp4_gemm = create_cudnn_execution_plans_fp4_gemm


def observe_model_warmup(*, real_bodies: bool) -> None:
    """In tests/models' child: record the piecewise warm-up of each case (patched
    sglang), and run sglang's ops' own bodies in the eager phases (``real_bodies``:
    for pristine servers, which never trace)."""
    import fi_child

    from harness.models import case_server_args, graph_capture, interpreter

    fi_child.gemm_module()
    fi_child.stub_cudnn()
    if real_bodies:
        read_alpha_on_device()
    built: list[str] = interpreter.STATE["jit_built"]
    # The server's Scheduler sets the fp4 GEMM backend from the server args before it
    # builds the model runner (initialize_fp4_gemm_config); modelsim builds the runner
    # without a Scheduler.
    from sglang.srt.layers.quantization import fp4_utils as _fp4_utils

    server_args_for = case_server_args.server_args_for

    def server_args_for_(*args: Any, **kwargs: Any) -> Any:
        server_args = server_args_for(*args, **kwargs)
        _fp4_utils.FP4_GEMM_RUNNER_BACKEND = None
        _fp4_utils.initialize_fp4_gemm_config(server_args)
        return server_args

    case_server_args.server_args_for = server_args_for_
    warmups: list[dict[str, Any]] = []
    try:
        from sglang.srt.layers.quantization import fp4_utils
        from sglang.srt.model_executor import piecewise_cuda_graph_runner as runner_module
    except ImportError:  # pragma: no cover - every stack has both
        return
    warmup = getattr(fp4_utils, "warmup_flashinfer_fp4", None)
    if warmup is not None and hasattr(fp4_utils, "flashinfer_fp4_modules"):

        def warmup_flashinfer_fp4(device: Any, model: Any) -> Any:
            start = len(built)
            kinds = fp4_utils.flashinfer_fp4_modules(model)
            warmed = warmup(device, model)
            warmups.append({"kinds": kinds, "warmed": warmed, "built": built[start:]})
            return warmed

        fp4_utils.warmup_flashinfer_fp4 = warmup_flashinfer_fp4
        runner_module.warmup_flashinfer_fp4 = warmup_flashinfer_fp4
    capture = graph_capture.capture

    def capture_(built_model: Any) -> dict[str, Any]:
        with real_op_bodies() if real_bodies else contextlib.nullcontext():
            report: dict[str, Any] = capture(built_model)
        report["warmups"] = warmups
        return report

    graph_capture.capture = capture_
