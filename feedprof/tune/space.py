"""The search space: each framework's knobs, their legal combinations, what a
config costs, and which secondary knobs are worth a trial.

A space knows nothing of how trials run or in what order they are asked for
(strategy.py decides that); it answers questions about configs.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from feedprof.analyse import rules
from feedprof.analyse.evidence import config_key
from feedprof.analyse.measured import cpu_use
from feedprof.analyse.measurements import CpuUse
from feedprof.frameworks.paste import Paste
from feedprof.frameworks.torch import paste_for
from feedprof.store import Framework, LoaderRecord, Trial, knobs
from feedprof.store.knobs.dataloader import effective
from feedprof.store.knobs.threads import legal_threads, threads_of
from feedprof.store.reasons import PersistentWorkersComputed, PinMemoryNoEffect, Reason
from feedprof.tune.space_order import in_order_gain, in_order_variant, order_findings
from feedprof.tune.space_threads import thread_variants, thread_variants_beside

Config = Dict[str, Any]


class Variant(NamedTuple):
    """A config worth a trial beside the best (a secondary knob changed), and the least batches
    its window needs (one that spans an epoch boundary, where the change shows only there)."""

    config: Config
    min_window_batches: Optional[int] = None


def job_cores(use: CpuUse) -> Optional[float]:
    """Cores the job itself used: its main process and its workers (not the machine's other work)."""
    if use.main_cores is None:
        return None
    return use.main_cores + (use.workers_cores or 0.0)


def job_fills_cpus(use: CpuUse, cpu_cap: int) -> Optional[bool]:
    cores = job_cores(use)
    return None if cores is None else cores >= rules.SATURATED_SHARE * cpu_cap


def ladder_rungs(limit: int, extra: Tuple[int, ...] = ()) -> List[int]:
    """0, 2, 4, 8, ... up to ``limit``, plus any ``extra`` stops (the CPU count).

    One worker is left to the refinement step (halfway between 0 and 2): it
    is rarely the best (a single worker adds IPC to the same serial work), so
    it is only measured when 2 wins and something cheaper might do.
    """
    rungs = {0}
    n = 2
    while n <= limit:
        rungs.add(n)
        n *= 2
    rungs.update(e for e in extra if 0 <= e <= limit)
    rungs.add(limit)
    return sorted(rungs)


class Space:
    """Interface every framework's space implements."""

    framework = ""
    primary = ""  # the knob the worker ladder walks
    knobs: Tuple[str, ...] = ()
    allow_reorder = False  # --allow-reorder: settings that change the order of samples may be recommended

    def __init__(self, baseline: Config, cpu_cap: int, max_primary: int, cuda_used: Optional[bool]):
        self.cpu_cap = max(1, cpu_cap)  # (first: legalize reads it)
        self.max_primary = max(1, max_primary)
        self.cuda_used = cuda_used
        self.baseline = self.legalize(dict(baseline))

    # -- per framework ----------------------------------------------------

    def legalize(self, config: Config) -> Config:
        raise NotImplementedError

    def ceiling_config(self) -> Config:
        """Settings for the compute-ceiling trial (the batch is replayed anyway)."""
        raise NotImplementedError

    def cost(self, config: Config) -> tuple:
        """Orders configs cheapest first (fewest workers, least memory)."""
        raise NotImplementedError

    def secondary(self, best: Trial, tol: float, measured: Sequence[Trial]) -> List[Variant]:
        """Variants of the best config worth a trial."""
        return []

    def finalize(self, pick: Trial, tol: float, trials: Sequence[Trial] = ()) -> Tuple[Config, List[Reason]]:
        """The recommended config from the picked trial, with anything judged
        rather than trialled (and why)."""
        return self.legalize(dict(pick.config)), []

    def cpu_bound(self, trial: Trial) -> Optional[bool]:
        """Are the CPUs what limits this trial's workers? (``cpu_verdict`` on its CPU use.)"""
        return self.cpu_verdict(trial.config, cpu_use(trial))

    def cpu_verdict(self, config: Config, use: CpuUse) -> Optional[bool]:
        """Are the CPUs what limits this config's workers, given its CPU use (a trial's, or the
        real run's windows')? The one CPU rule (analyse/rules.py) on the workers: CPU that other
        processes take is never blamed on them; if it starves them, it shows as their wait for a CPU."""
        return rules.cpu_bound(self.workers(config), use.workers_cores, use.runq_cores, self.cpu_cap)

    def notes(self) -> List[Reason]:
        return []

    def hold_pools(self, config: Config) -> Optional[Config]:
        """``config`` with each loader worker's thread pools held to its share of the cores
        (store/knobs/threads.py), where this framework's workers can be held (None: not here)."""
        return None

    def probe_only(self, config: Config) -> bool:
        """A config measured and reported but never recommended (it changes the order of samples)."""
        return False

    def ladder_base(self, config: Config, short_epochs: bool) -> Config:
        """The config the worker ladder varies the primary knob of."""
        return config

    def workers(self, config: Config) -> int:
        """Worker processes (or threads) the config runs."""
        return self.primary_of(config)

    def loads_in_loop(self, config: Config) -> bool:
        """The config loads each batch in the training loop's own thread (no workers apart)."""
        return self.primary_of(config) == 0

    def in_flight(self, config: Config) -> int:
        """Batches the config can hold between loader and loop."""
        return knobs.in_flight(self.framework, self.legalize(dict(config)))

    def paste_line(self, config: Config, loader: Optional[LoaderRecord], script: str) -> str:
        """A paste-ready line that sets ``config``."""
        return self.describe(config)

    def paste(self, config: Config, loader: Optional[LoaderRecord], script: str, argv: Sequence[str] = ()) -> Paste:
        """What to paste (and run) to set ``config``, and where each setting
        lives (frameworks/paste.Paste: the line and its findings)."""
        return Paste(self.paste_line(config, loader, script))

    # -- shared -----------------------------------------------------------

    def key(self, config: Config) -> tuple:
        """The config's identity in this space: the key (analyse/evidence.py) of its knobs, made legal."""
        cfg = self.legalize(dict(config))
        return config_key({k: cfg.get(k) for k in self.knobs})

    def with_primary(self, config: Config, n: int) -> Config:
        return self.legalize({**config, self.primary: n})

    def primary_of(self, config: Config) -> int:
        return int(config.get(self.primary) or 0)

    def rungs(self, limit: int) -> List[int]:
        return ladder_rungs(limit, extra=(self.cpu_cap,))

    def describe(self, config: Config) -> str:
        """The config made legal, as its framework's keywords (store/knobs: render's config_words
        too), leaving out the framework's defaults."""
        return knobs.describe(self.framework, self.legalize(dict(config)))


class TorchSpace(Space):
    framework = Framework.TORCH
    primary = "num_workers"
    knobs = ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers")

    def legalize(self, config: Config) -> Config:
        out = effective(config)
        if not out["num_workers"] or out.get("in_order", True):  # in_order: only ever False, with workers
            out.pop("in_order", None)
        return legal_threads(out, out["num_workers"], self.cpu_cap)

    def key(self, config: Config) -> tuple:
        cfg = self.legalize(dict(config))
        return config_key({**{k: cfg.get(k) for k in self.knobs}, **({"in_order": False} if "in_order" in cfg else {}),
                           **threads_of(cfg)})

    def hold_pools(self, config: Config) -> Optional[Config]:
        held = self.legalize({**config, "worker_threads": 1}) if self.primary_of(config) else {}
        return held if held.get("worker_threads") else None  # (a share as large as the machine holds nothing)

    def probe_only(self, config: Config) -> bool:
        return self.legalize(dict(config)).get("in_order", True) is False and not self.allow_reorder

    def ladder_base(self, config: Config, short_epochs: bool) -> Config:
        """With short epochs, workers are judged with persistent_workers=True:
        restarting N workers every epoch would otherwise bury what N workers
        deliver (16 workers restarting cost 1 s against a 0.3 s epoch here)."""
        return {**config, "persistent_workers": True} if short_epochs else config

    def ceiling_config(self) -> Config:
        # no workers: nothing competes with the training step for the CPU
        return self.legalize({**self.baseline, "num_workers": 0})

    def cost(self, config: Config) -> tuple:
        cfg = self.legalize(config)
        n = cfg["num_workers"]
        return (n, bool(cfg["persistent_workers"]), n * (cfg["prefetch_factor"] or 0), bool(cfg["pin_memory"]),
                "in_order" in cfg, len(threads_of(cfg)))  # (a thread setting is one more thing to paste)

    def secondary(self, best: Trial, tol: float, measured: Sequence[Trial]) -> List[Variant]:
        cfg = self.legalize(best.config)
        n = cfg["num_workers"]
        out: List[Variant] = []
        if self.cuda_used and not cfg["pin_memory"]:  # batches go to CUDA: page-locked memory speeds the copy
            out.append(Variant({**cfg, "pin_memory": True}))
        if n == 0:  # (the workers' configs whose step competed with them may yet win, their threads set)
            return out + [Variant(self.legalize(c)) for c in thread_variants_beside(measured, self.cpu_cap)]
        wait = best.data_wait_fraction
        # A deeper queue absorbs bursts, and lets each worker run ahead instead of
        # blocking while its batches are handed over (measured here: 8 CPU-bound
        # workers, 113 -> 136 batches/s with prefetch_factor 2 -> 4).
        if wait is not None and wait >= PREFETCH_MIN_WAIT and (cfg["prefetch_factor"] or 2) < DEEP_PREFETCH:
            out.append(Variant({**cfg, "prefetch_factor": DEEP_PREFETCH}))
        out += [Variant(c) for c in in_order_variant(cfg, best)]
        out += [Variant(self.legalize(c)) for c in thread_variants(cfg, best, self.cpu_cap)]
        if not cfg["persistent_workers"]:
            pw = persistent_estimate(best)
            if pw is not None and pw.gain >= tol and pw.epoch_s <= MEASURE_EPOCH_S:
                # trialled across an epoch boundary, where the restart cost shows
                out.append(Variant({**cfg, "persistent_workers": True}, pw.batches_per_epoch + EPOCH_SPAN_EXTRA_BATCHES))
        return out

    def finalize(self, pick: Trial, tol: float, trials: Sequence[Trial] = ()) -> Tuple[Config, List[Reason]]:
        """Settings judged rather than trialled: persistent workers on epochs too
        long to measure two of, from the measured start-up amortised over the epoch."""
        cfg = self.legalize(pick.config)
        gain = in_order_gain(pick, trials, self.allow_reorder, self.key)
        judged: List[Reason] = [gain] if gain is not None else []
        if cfg["num_workers"] and not cfg["persistent_workers"]:
            pw = persistent_estimate(pick)
            if pw is not None and pw.gain >= tol and pw.epoch_s > MEASURE_EPOCH_S:
                return ({**cfg, "persistent_workers": True},
                        judged + [PersistentWorkersComputed(startup_s=pw.startup_s, gain=pw.gain, epoch_s=pw.epoch_s)])
        return cfg, judged

    def paste_line(self, config: Config, loader: Optional[LoaderRecord], script: str) -> str:
        return self.paste(config, loader, script).line

    def paste(self, config: Config, loader: Optional[LoaderRecord], script: str, argv: Sequence[str] = ()) -> Paste:
        """The paste, and what the settings change beyond speed (the order of samples: space_order.py)."""
        cfg = self.legalize(config)
        found = paste_for(cfg, loader, script, argv, self.cuda_used)
        return dataclasses.replace(found, findings=tuple(found.findings) + tuple(order_findings(cfg, loader)))

    def notes(self) -> List[Reason]:
        return [] if self.cuda_used else [PinMemoryNoEffect()]


PREFETCH_MIN_WAIT = 0.05  # the loop still waits this much: a deeper prefetch queue may help
DEEP_PREFETCH = 4  # the prefetch_factor tried when the loop still waits (torch's default is 2)
MEASURE_EPOCH_S = 4.0  # epochs up to this long: trial persistent_workers across a boundary
EPOCH_SPAN_EXTRA_BATCHES = 10  # a persistent_workers trial's window: one epoch and this many more


@dataclass(frozen=True)
class PersistentEstimate:
    gain: float  # share of epoch time saved
    startup_s: float  # per-epoch start-up without persistent workers
    epoch_s: float
    batches_per_epoch: int


def persistent_estimate(trial: Trial) -> Optional[PersistentEstimate]:
    """What persistent workers would save: per-epoch start-up (worker launch and
    first fetch, measured) less one batch's fetch, over the epoch's length."""
    run = trial.run
    if run is None or run.summary is None or not trial.batches_per_s:
        return None
    s = run.summary
    rec = next((r for r in run.loaders if r.loader_id == run.window.loader_id), None)
    bpe = rec.batches_per_epoch if rec else None
    startup = s.epoch_startup_s if s.epoch_startup_s is not None else s.time_to_first_batch_s
    if not bpe or startup is None:
        return None
    n = int(trial.config.get("num_workers") or 0)
    kept = min(startup, n / trial.batches_per_s)  # persistent workers still fetch the epoch's first batch
    epoch_s = startup + (bpe - 1) / trial.batches_per_s
    return PersistentEstimate(gain=max(0.0, startup - kept) / epoch_s, startup_s=startup, epoch_s=epoch_s,
                              batches_per_epoch=bpe)
