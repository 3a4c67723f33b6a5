"""The search space: each framework's knobs, their legal combinations, what a
config costs, and which secondary knobs are worth a trial.

A space knows nothing of how trials run or in what order they are asked for
(strategy.py decides that); it answers questions about configs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from feedprof.store import Trial
from feedprof.units import fmt_pct

Config = Dict[str, Any]
BUSY_WORKER_CORES = 0.9  # a worker using this much of a core is computing, not waiting
SATURATED_SYSTEM_PCT = 95.0  # the machine's CPUs are full: more workers only compete


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

    def __init__(self, baseline: Config, cpu_cap: int, max_primary: int, cuda_used: Optional[bool]):
        self.baseline = self.legalize(dict(baseline))
        self.cpu_cap = max(1, cpu_cap)
        self.max_primary = max(1, max_primary)
        self.cuda_used = cuda_used

    # -- per framework ----------------------------------------------------

    def legalize(self, config: Config) -> Config:
        raise NotImplementedError

    def ceiling_config(self) -> Config:
        """Settings for the compute-ceiling trial (the batch is replayed anyway)."""
        raise NotImplementedError

    def cost(self, config: Config) -> tuple:
        """Orders configs cheapest first (fewest workers, least memory)."""
        raise NotImplementedError

    def secondary(self, best: Trial, tol: float, measured: List[Trial]) -> List[Tuple[Config, str, dict]]:
        """Variants of the best config worth a trial: (config, why, trial overrides)."""
        return []

    def finalize(self, pick: Trial, tol: float, trials: List[Trial] = ()) -> Tuple[Config, List[str]]:
        """The recommended config from the picked trial, with anything judged
        rather than trialled (and why)."""
        return self.legalize(dict(pick.config)), []

    def cpu_bound(self, trial: Trial) -> Optional[bool]:
        """Are the CPUs what limits this config? Workers (processes) that use
        nearly a core each, or a machine whose CPUs are saturated, are CPU-bound;
        anything less means the workers also wait (I/O, handing batches over),
        and more workers than CPUs can fill the idle time."""
        n = self.workers(trial.config)
        if n <= 0 or trial.workers_cpu_pct is None:
            return None
        per_worker = trial.workers_cpu_pct / 100 / n
        return per_worker >= BUSY_WORKER_CORES or (trial.system_cpu_pct or 0) >= SATURATED_SYSTEM_PCT

    def notes(self) -> List[str]:
        return []

    def ladder_base(self, config: Config, short_epochs: bool) -> Config:
        """The config the worker ladder varies the primary knob of."""
        return config

    def workers(self, config: Config) -> int:
        """Worker processes (or threads) the config runs."""
        return self.primary_of(config)

    def in_flight(self, config: Config) -> int:
        """Batches the config can hold between loader and loop."""
        return 0

    def code(self, config: Config, loader: Any, script: str) -> str:
        """A paste-ready line that sets ``config``."""
        return self.describe(config)

    # -- shared -----------------------------------------------------------

    def key(self, config: Config) -> tuple:
        cfg = self.legalize(dict(config))
        return tuple((k, cfg.get(k)) for k in self.knobs)

    def with_primary(self, config: Config, n: int) -> Config:
        return self.legalize({**config, self.primary: n})

    def primary_of(self, config: Config) -> int:
        return int(config.get(self.primary) or 0)

    def rungs(self, limit: int) -> List[int]:
        return ladder_rungs(limit, extra=(self.cpu_cap,))

    def describe(self, config: Config) -> str:
        cfg = self.legalize(dict(config))
        return ", ".join(f"{k}={cfg[k]}" for k in self.knobs if k in cfg and cfg[k] is not None)


class TorchSpace(Space):
    framework = "torch"
    primary = "num_workers"
    knobs = ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers")

    def legalize(self, config: Config) -> Config:
        from feedprof.frameworks.torch import effective

        return effective(config)

    def describe(self, config: Config) -> str:
        """num_workers, plus only the knobs that differ from PyTorch's defaults."""
        cfg = self.legalize(dict(config))
        parts = [f"num_workers={cfg['num_workers']}"]
        if cfg["num_workers"] and cfg["prefetch_factor"] not in (None, 2):
            parts.append(f"prefetch_factor={cfg['prefetch_factor']}")
        if cfg["num_workers"] and cfg["persistent_workers"]:
            parts.append("persistent_workers=True")
        if cfg["pin_memory"]:
            parts.append("pin_memory=True")
        return ", ".join(parts)

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
        return (n, bool(cfg["persistent_workers"]), n * (cfg["prefetch_factor"] or 0), bool(cfg["pin_memory"]))

    def secondary(self, best: Trial, tol: float, measured: List[Trial]) -> List[Tuple[Config, str, dict]]:
        cfg = self.legalize(best.config)
        n = cfg["num_workers"]
        out: List[Tuple[Config, str, dict]] = []
        if self.cuda_used and not cfg["pin_memory"]:
            out.append(({**cfg, "pin_memory": True}, "batches go to CUDA: page-locked memory speeds the copy", {}))
        if n == 0:
            return out
        wait = best.data_wait_fraction
        # A deeper queue absorbs bursts, and lets each worker run ahead instead of
        # blocking while its batches are handed over (measured here: 8 CPU-bound
        # workers, 113 -> 136 batches/s with prefetch_factor 2 -> 4).
        if wait is not None and wait >= PREFETCH_MIN_WAIT and (cfg["prefetch_factor"] or 2) < 4:
            out.append(({**cfg, "prefetch_factor": 4}, f"the loop still waits {fmt_pct(wait)} of the time: "
                                                       "a deeper prefetch queue absorbs slow batches", {}))
        if not cfg["persistent_workers"]:
            pw = persistent_estimate(best)
            if pw is not None and pw.gain >= tol and pw.epoch_s <= MEASURE_EPOCH_S:
                out.append(({**cfg, "persistent_workers": True},
                            f"each epoch pays {fmt_pct(pw.gain)} of its time restarting workers",
                            {"min_window_batches": pw.batches_per_epoch + 10}))
        return out

    def finalize(self, pick: Trial, tol: float, trials: List[Trial] = ()) -> Tuple[Config, List[str]]:
        """Settings judged rather than trialled: persistent workers on epochs too
        long to measure two of, from the measured start-up amortised over the epoch."""
        cfg = self.legalize(pick.config)
        if cfg["num_workers"] and not cfg["persistent_workers"]:
            pw = persistent_estimate(pick)
            if pw is not None and pw.gain >= tol and pw.epoch_s > MEASURE_EPOCH_S:
                return ({**cfg, "persistent_workers": True},
                        [f"persistent_workers=True: every epoch spends about {pw.startup_s:.1f} s starting "
                         f"workers, {fmt_pct(pw.gain)} of a {pw.epoch_s:.0f} s epoch (computed from the measured "
                         "start-up, not trialled: epochs this long are too slow to measure twice)"])
        return cfg, []

    def in_flight(self, config: Config) -> int:
        cfg = self.legalize(config)
        return cfg["num_workers"] * (cfg["prefetch_factor"] or 0)

    def code(self, config: Config, loader: Any, script: str) -> str:
        from feedprof.frameworks.torch import code_line

        return code_line(self.legalize(config), loader, script)

    def notes(self) -> List[str]:
        if not self.cuda_used:
            return ["pin_memory has no effect here: the script does not move batches to a GPU"]
        return []


PREFETCH_MIN_WAIT = 0.05  # the loop still waits this much: a deeper prefetch queue may help
MEASURE_EPOCH_S = 4.0  # epochs up to this long: trial persistent_workers across a boundary


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


def make_space(framework: str, baseline: Config, cpu_cap: int, max_primary: int,
               cuda_used: Optional[bool]) -> Space:
    from feedprof.tune.space_tf import KerasSpace, TfDataSpace, TfKerasSpace  # they build on this module

    spaces = {"torch": TorchSpace, "keras": KerasSpace, "tf.keras": TfKerasSpace, "tf.data": TfDataSpace}
    try:
        cls = spaces[framework]
    except KeyError:
        raise ValueError(f"feedprof cannot tune {framework!r} loaders yet") from None
    return cls(baseline, cpu_cap, max_primary, cuda_used)
