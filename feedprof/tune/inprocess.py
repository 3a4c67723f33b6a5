"""``feedprof.profile(tune=True)``: the online search inside the user's own loop.

NOTE [ Tuning in the user's process ]

    prof.watch(loader) ─► an OnlineLoader (frameworks/torch_online.py): the same switching,
                          in-order delivery and untouched random streams as tune --online
    each window ─► OnlineTuning emits ─► Decider.tell (no files, no parent) ─► decide
                 ─► publish ─► OnlineTuning.apply: the next batch is served by the new config
    prof.stop() ─► the pools are shut down; prof.tuned() ─► a TuneResult like tune --online's
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional

from feedprof.frameworks.contract import OwnIterator
from feedprof.record.clock import Clock
from feedprof.trial.online_child import OnlineTuning
from feedprof.tune.online import Decider, OnlineOptions, limits_for

if TYPE_CHECKING:
    from torch.utils.data import DataLoader

    from feedprof.frameworks.torch_switch import TorchOnlineLoader
from feedprof.store import Run, TuneResult


class InProcessTuner:
    def __init__(self, clock: Clock, origin_s: float, opts: OnlineOptions = OnlineOptions()):
        from feedprof.record.host import usable_cpu_count

        self.clock = clock
        self.origin_s = origin_s
        self.decider = Decider(trial_dir="", limits=limits_for(opts, usable_cpu_count()), opts=opts, clock=clock,
                               origin_s=origin_s, publish=self._publish)
        self.tuning = OnlineTuning("", self._emit, clock.now_s, origin_s, opts.window_seconds,
                                   opts.min_window_batches, allow_rng_change=opts.allow_rng_change)
        self.loaders: List["TorchOnlineLoader"] = []

    def _emit(self, event: str, **fields: Any) -> None:
        self.decider.tell({"event": event, "t_s": self.clock.now_s() - self.origin_s, **fields})

    def _publish(self, decision: Dict[str, Any]) -> None:
        self.tuning.apply(decision)

    def wrap(self, loader: "DataLoader", loader_id: int) -> Optional["_Epochs"]:
        """The loader's epochs served online, or None if it cannot switch mid-epoch (said in the result).
        A loop that calls prof.watch(loader) every epoch keeps one OnlineLoader for that loader."""
        from feedprof.frameworks.torch import KNOBS, legalize
        from feedprof.frameworks.torch_online import online_capable
        from feedprof.frameworks.torch_switch import TorchOnlineLoader

        for ol in self.loaders:
            if ol.loader is loader:
                return _Epochs(ol)
        why_not = online_capable(loader)
        self._emit("online_loader", loader_id=loader_id, mode="mid_epoch" if why_not is None else "none",
                   why_not=why_not or "")
        if why_not is not None:
            return None
        own = legalize({k: getattr(loader, k, None) for k in KNOBS})
        ol = TorchOnlineLoader(loader, self.tuning, loader_id, own)
        self.loaders.append(ol)
        return _Epochs(ol)

    def close(self) -> None:
        self.tuning.finish()

    def result(self, run: Run) -> TuneResult:
        from feedprof.tune.online_result import online_result

        script = sys.argv[0] if sys.argv and sys.argv[0] else ""
        return online_result(script, sys.argv[1:], run.host, run.started_at, run.duration_s, run, self.decider,
                             None, complete=True)


class _Epochs:
    """What prof.watch hands back for a tuned loader: each iteration is an online epoch."""

    def __init__(self, ol: "TorchOnlineLoader"):
        self.ol = ol

    def __iter__(self) -> Iterator[Any]:
        if self.ol.busy():  # a second live iterator: the loader's own, as torch gives it
            self.ol.own_iterator()
            return OwnIterator(self.ol, self.ol.tuning, lambda: iter(self.ol.loader))
        self.ol.tuning.consider(self.ol)
        return self.ol.epoch()

    def __len__(self) -> int:
        return len(self.ol.loader)
