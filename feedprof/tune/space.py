"""The search space: each framework's knobs, their legal combinations, what a
config costs, and which secondary knobs are worth a trial.

A space knows nothing of how trials run or in what order they are asked for
(strategy.py decides that); it answers questions about configs.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from feedprof.store import Trial

Config = Dict[str, Any]


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

    def notes(self) -> List[str]:
        return []

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
        if wait is not None and wait >= 0.05 and (cfg["prefetch_factor"] or 2) < 4:
            out.append(({**cfg, "prefetch_factor": 4}, f"the loop still waits {wait:.0%} of the time: "
                                                       "a deeper prefetch queue absorbs slow batches", {}))
        if not cfg["persistent_workers"]:
            gain, bpe = persistent_gain(best)
            if gain is not None and gain >= tol and bpe:
                out.append(({**cfg, "persistent_workers": True},
                            f"each epoch pays {gain:.0%} of its time restarting workers",
                            {"min_window_batches": 2 * bpe + 4}))
        return out

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


def persistent_gain(trial: Trial) -> Tuple[Optional[float], Optional[int]]:
    """Predicted share of epoch time that persistent workers would save:
    per-epoch start-up over start-up plus the epoch's steady time."""
    run = trial.run
    if run is None or run.summary is None or not trial.batches_per_s:
        return None, None
    s = run.summary
    rec = next((r for r in run.loaders if r.loader_id == run.window.loader_id), None)
    bpe = rec.batches_per_epoch if rec else None
    startup = s.epoch_startup_s if s.epoch_startup_s is not None else s.time_to_first_batch_s
    if not bpe or startup is None:
        return None, bpe
    epoch_s = (bpe - 1) / trial.batches_per_s
    return startup / (startup + epoch_s), bpe


SPACES = {"torch": TorchSpace}


def make_space(framework: str, baseline: Config, cpu_cap: int, max_primary: int,
               cuda_used: Optional[bool]) -> Space:
    try:
        cls = SPACES[framework]
    except KeyError:
        raise ValueError(f"feedprof cannot tune {framework!r} loaders yet") from None
    return cls(baseline, cpu_cap, max_primary, cuda_used)
