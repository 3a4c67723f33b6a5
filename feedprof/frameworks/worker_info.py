"""Which datasets' loader workers ask ``torch.utils.data.get_worker_info()``.

An ``IterableDataset`` decides itself what each worker yields: one that never
asks which worker it runs in yields the whole stream in every worker, so each
record arrives once per worker (analyse/hazards.py also sees it in the
batches themselves). In a trial child:

    install() ─► torch.utils.data.get_worker_info patched (where scripts and
                 libraries look it up); forked workers inherit the patch
    a worker's call, from the dataset's code (not PyTorch's own: its collate
    asks in every worker) ─► id(info.dataset) written to a table in shared
    anonymous memory, one slot per dataset and worker
    the trial's record ─► asked(id(loader.dataset), ...) reads the table

A forked worker's copy of the dataset lives at the address of the loader's,
so the ids match. Under spawn or forkserver the workers run unpatched code:
not observable (None).
"""
from __future__ import annotations

import mmap
import multiprocessing
import os
import struct
import sys
from typing import Any, Callable, Optional


class WorkerInfoCalls:
    SLOTS = 1024

    def __init__(self) -> None:
        self._table = mmap.mmap(-1, 8 * self.SLOTS)  # MAP_SHARED: forked workers write, the trial reads

    def _slot(self, key: int, worker: int) -> int:
        return 8 * ((key // 16 + worker) % self.SLOTS)

    def wrap(self, original: Callable[[], Any], torch_dir: str) -> Callable[[], Any]:
        def get_worker_info() -> Any:
            info = original()
            if info is not None and not sys._getframe(1).f_code.co_filename.startswith(torch_dir):
                key = id(info.dataset)
                struct.pack_into("Q", self._table, self._slot(key, info.id), key)
            return info

        get_worker_info.__wrapped__ = original  # type: ignore[attr-defined]
        return get_worker_info

    def install(self) -> "WorkerInfoCalls":
        """Patch ``get_worker_info`` where scripts and libraries look it up."""
        import torch
        import torch.utils.data as tud
        from torch.utils.data import dataloader

        patched = self.wrap(tud.get_worker_info, os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)
        tud.get_worker_info = patched
        dataloader.get_worker_info = patched
        return self

    def asked(self, key: int, num_workers: int, context: Any) -> Optional[bool]:
        """Did the workers of the dataset ``id() == key`` ask (None: no workers, or
        not forked)? Called when the trial's record is written, after they ran."""
        if not num_workers:
            return None
        method = context.get_start_method() if context is not None else multiprocessing.get_start_method(True)
        if method not in (None, "fork"):  # None: the default context, fork on Linux
            return None
        return any(struct.unpack_from("Q", self._table, self._slot(key, i))[0] == key
                   for i in range(min(num_workers, self.SLOTS)))
