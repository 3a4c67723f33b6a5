"""Whether a pool's workers draw from their random streams as they load (augmentation in the
dataset or the collate_fn): the pool's collate_fn is wrapped, and in each worker the wrapper
compares the worker's streams (frameworks/torch_rng.py) between one batch's collate and the
next (the fetch between them) and around the collate itself, and sets a bit per stream in
one byte shared with the main process. A worker's first batch is not compared (there is
nothing before it to compare with); in the main process (0 workers) the wrapper only calls
through. What the user's code sees is unchanged: the dataset, get_worker_info(), the batch."""
from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from feedprof.frameworks.torch_rng import STREAMS, moved, snapshot


class WorkerDraws:
    def __init__(self) -> None:
        from multiprocessing.sharedctypes import RawValue

        self.bits = RawValue("b", 0)

    def wrap(self, collate_fn: Callable[[Any], Any]) -> "_Watching":
        return _Watching(collate_fn, self.bits)

    def streams(self) -> Tuple[str, ...]:
        """The streams the workers were seen drawing from."""
        value = self.bits.value
        return tuple(s for k, s in enumerate(STREAMS) if value & (1 << k))


class _Watching:
    def __init__(self, collate_fn: Callable[[Any], Any], bits: Any):
        self.collate_fn = collate_fn
        self.bits = bits
        self._last: Optional[Any] = None  # (per worker process: each has its own copy)

    def __call__(self, samples: Any) -> Any:
        from torch.utils.data import get_worker_info

        if get_worker_info() is None:
            return self.collate_fn(samples)
        before = snapshot()
        if self._last is not None:
            self._tell(moved(self._last, before))
        out = self.collate_fn(samples)
        self._last = snapshot()
        self._tell(moved(before, self._last))
        return out

    def _tell(self, streams: Any) -> None:
        for k, name in enumerate(STREAMS):
            if name in streams:
                self.bits.value |= 1 << k
