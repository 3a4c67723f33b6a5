"""Run a callback right after a module is first imported (a post-import hook).

A trial child must patch ``torch.utils.data.DataLoader`` before the script
builds one, without importing torch itself: a Keras script would otherwise pay
~1.3 s and 220 MiB for a framework it never uses. The finder below sits first
on ``sys.meta_path``, lets the normal machinery find the module, and wraps its
loader so the callback runs once the module has executed.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence
from types import ModuleType
from importlib.machinery import ModuleSpec

Callback = Callable[[Any], None]

_callbacks: Dict[str, List[Callback]] = {}
_lock = threading.RLock()
_finder = None


def when_imported(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once ``name`` is imported (now, if it already is)."""
    global _finder
    with _lock:
        module = sys.modules.get(name)
        if module is not None:
            callback(module)
            return
        _callbacks.setdefault(name, []).append(callback)
        if _finder is None:
            _finder = _PostImportFinder()
            sys.meta_path.insert(0, _finder)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self._busy: set = set()

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[ModuleType] = None) -> Optional[ModuleSpec]:
        if fullname not in _callbacks or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _NotifyingLoader(spec.loader, fullname)
        return spec


class _NotifyingLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, name: str):
        self._loader = loader
        self._name = name

    def create_module(self, spec: ModuleSpec) -> Optional[ModuleType]:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._loader  # the module keeps its real loader
        if getattr(module.__spec__, "loader", None) is self:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        with _lock:
            callbacks = _callbacks.pop(self._name, [])
        for cb in callbacks:
            cb(module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, ...
        return getattr(self._loader, name)
