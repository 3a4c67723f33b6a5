"""Run a function right after a module is first imported (Python has no built-in
post-import hook). Lets the bootstrap patch torch/keras/tensorflow only if and
when the script imports them, so a torch script never pays for TensorFlow."""
from __future__ import annotations

import importlib.abc
import sys
from typing import Any, Callable, Dict

_HOOKS: Dict[str, Callable[[Any], None]] = {}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any, name: str):
        self.inner, self.name = inner, name

    def create_module(self, spec: Any) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.inner.exec_module(module)
        hook = _HOOKS.pop(self.name, None)
        if hook is not None:
            hook(module)

    def __getattr__(self, name: str) -> Any:  # resources, get_code, ...: the real loader's
        return getattr(self.inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _HOOKS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, name)
                return spec
        return None


_FINDER = _Finder()


def after_import(name: str, hook: Callable[[Any], None]) -> None:
    if name in sys.modules:
        hook(sys.modules[name])
        return
    _HOOKS[name] = hook
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
