"""Device tensors as fakes (child side; stand-in 8 of :mod:`modelsim`): the one
FakeTensorMode of a case, the factories that make fake CUDA tensors while sglang builds
its state on the host, and the swap of a built model's tensors for fakes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

_FAKE: dict[str, Any] = {}


def fake_mode() -> Any:
    """The FakeTensorMode every fake CUDA tensor of a case lives in.

    A fake holds no data: a host read of a device value (``.item()``, e.g. the
    decode runner's ``seq_lens.sum().item()``) answers an unbacked symbol, as a
    traced program would see it; branching on one fails loudly."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    if "fake" not in _FAKE:
        _FAKE["fake"] = _host_real(FakeTensorMode)(allow_non_fake_inputs=True,
                                                   shape_env=ShapeEnv(allow_scalar_outputs=True))
        _ignore_fake_mode_logging()
    return _FAKE["fake"]


def _host_real(base: type) -> type:
    """The case's FakeTensorMode class: an op whose tensors are all real host tensors runs
    for real (a GPU server computes on its host tensors; the base mode would turn them into
    fakes, and a host read of one, e.g. sglang 0.5.15's ``any(extend_prefix_lens_cpu)``,
    would be an unbacked symbol).  Higher-order ops find their rule by the mode's class:
    the subclass gets the base's rules, now and for each one defined later."""
    import torch
    from torch._ops import HigherOrderOperator
    from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
    from torch.utils import _pytree

    def all_host(args: Any, kwargs: dict[str, Any]) -> bool:
        leaves = _pytree.arg_tree_leaves(*args, **kwargs)
        tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
        devices = [t for t in leaves if isinstance(t, torch.device)]
        return (bool(tensors) and all(type(t) is torch.Tensor and t.device.type == "cpu" for t in tensors)
                and all(d.type == "cpu" for d in devices) and not any(isinstance(t, FakeTensor) for t in tensors))

    class HostRealFakeTensorMode(base):  # type: ignore[misc,valid-type]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if all_host(args, kwargs):
                with unset_fake_temporarily():
                    return func(*args, **kwargs)
            return super().__torch_dispatch__(func, types, args, kwargs)

    real_dispatch = HigherOrderOperator.dispatch

    def dispatch(self: Any, *args: Any, **kwargs: Any) -> Any:
        if base in self.python_key_table and HostRealFakeTensorMode not in self.python_key_table:
            self.python_key_table[HostRealFakeTensorMode] = self.python_key_table[base]
        return real_dispatch(self, *args, **kwargs)

    HigherOrderOperator.dispatch = dispatch  # type: ignore[method-assign]
    return HostRealFakeTensorMode


def _ignore_fake_mode_logging() -> None:
    """This mode is on the dispatch stack while Dynamo traces (a GPU run has none there):
    torch 2.9's Dynamo then inlines its ``__torch_dispatch__`` on a ``torch.as_tensor`` of
    a Python scalar and breaks the graph at its ``log.debug``. Its logger, and only its,
    is one Dynamo ignores."""
    import torch._dynamo.config
    from torch._subclasses import fake_tensor

    ignored = getattr(torch._dynamo.config, "ignore_logger_methods", None)
    if ignored is not None:
        ignored.update({fake_tensor.log.debug, fake_tensor.log.isEnabledFor})


# The factories sglang's group coordinators allocate device tensors with.
_FACTORIES = ("empty", "empty_strided", "zeros", "ones", "full", "arange", "rand", "randn", "empty_like",
              "zeros_like", "ones_like", "full_like")


@contextlib.contextmanager
def device_tensors_fake() -> Iterator[None]:
    """Factories called for a CUDA device make fake tensors (:func:`fake_mode`); every
    other tensor is a real host tensor.  Fakes work outside the mode they were made in."""
    import torch
    from torch.overrides import TorchFunctionMode

    factories = {getattr(torch, name) for name in _FACTORIES}

    def on_device(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        device = kwargs.get("device")
        if device is None:
            like = next((a for a in args if isinstance(a, torch.Tensor)), None)
            return like is not None and like.device.type == "cuda"
        return torch.device(device).type == "cuda"

    class DeviceTensorsFake(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            if func in factories and on_device(args, kwargs):
                with fake_mode():
                    return func(*args, **kwargs)
            return func(*args, **kwargs)

    with DeviceTensorsFake():
        yield


@contextlib.contextmanager
def host_tensors_real() -> Iterator[None]:
    """Inside the case's FakeTensorMode, tensors made for the host (a factory or
    ``torch.tensor`` called with ``device="cpu"``) are real host tensors, as on a GPU
    server (sglang 0.5.15's dummy prefill batch, ``extend_prefix_lens_cpu``)."""
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.overrides import TorchFunctionMode

    factories = {getattr(torch, name) for name in _FACTORIES} | {torch.tensor, torch._C._VariableFunctions.tensor}

    class HostTensorsReal(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            device = kwargs.get("device")
            if func in factories and device is not None and torch.device(device).type == "cpu":
                with unset_fake_temporarily():
                    return func(*args, **kwargs)
            return func(*args, **kwargs)

    with HostTensorsReal():
        yield


@contextlib.contextmanager
def host_is_device() -> Iterator[None]:
    """While the model is built on the host, ``Tensor.cuda()`` keeps tensors there."""
    import torch

    real = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.cuda = real  # type: ignore[method-assign]


def to_fake_cuda(root: Any) -> int:
    """Swap every tensor reachable from ``root`` (parameters, buffers, tensor
    attributes of modules and of the sglang objects they hold) for a fake CUDA
    tensor of the same shape, stride and dtype.  The same tensor maps to the same
    fake (tied weights stay tied).  Returns the number of tensors swapped."""
    import torch

    memo: dict[int, Any] = {}
    seen: set[int] = set()

    def fake(t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, torch._subclasses.fake_tensor.FakeTensor):
            return t
        key = id(t)
        if key not in memo:
            with fake_mode():
                new = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="cuda")
            if isinstance(t, torch.nn.Parameter):
                param = torch.nn.Parameter(new, requires_grad=False)
                param.__dict__.update({k: v for k, v in t.__dict__.items()})
                new = param
            memo[key] = new
        return memo[key]

    def swap(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return fake(value)
        if isinstance(value, list):
            value[:] = [swap(v) for v in value]
            return value
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return tuple(swap(v) for v in value)
        if isinstance(value, dict):
            for k in list(value):
                value[k] = swap(value[k])
            return value
        visit(value)
        return value

    def visit(obj: Any) -> None:
        if id(obj) in seen or isinstance(obj, (type, types_module())):
            return
        module_name = type(obj).__module__ or ""
        if not (isinstance(obj, torch.nn.Module) or module_name.startswith(("sglang", "flashinfer", "sgl_kernel"))):
            return
        seen.add(id(obj))
        if isinstance(obj, torch.nn.Module):
            for name, p in list(obj._parameters.items()):
                if p is not None:
                    obj._parameters[name] = fake(p)
            for name, b in list(obj._buffers.items()):
                if b is not None:
                    obj._buffers[name] = fake(b)
            for child in obj._modules.values():
                if child is not None:
                    visit(child)
        attrs = getattr(obj, "__dict__", None)
        if attrs is None:
            return
        for name, value in list(attrs.items()):
            if name in ("_parameters", "_buffers", "_modules"):
                continue
            attrs[name] = swap(value)

    visit(root)
    return len(memo)


def types_module() -> type:
    import types

    return types.ModuleType
