"""Stand-in for sgl_kernel on CPU (its ops are CUDA-only; sglang imports it when told CUDA is there).

Any ``sgl_kernel.<sub>`` imports as a stub module; any name in it is a placeholder that
raises when called, so image code imports but never runs.
"""
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0"


class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return cls


class _Unavailable(metaclass=_Meta):
    def __init__(self, *args, **kwargs):
        raise RuntimeError("sgl_kernel is a stub in the fp4graph CPU harness")

    def __class_getitem__(cls, item):
        return cls


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Unavailable


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = __getattr__
        return module

    def exec_module(self, module):
        return None


sys.meta_path.insert(0, _Finder())
