"""What is known of one config, whichever search measured it: the record both searches pick from,
recommend() reads, and results.json holds (``TuneResult.evidence``) in one shape for both modes.
Offline its measurements are isolated trials (``TuneResult.trials``); online they are stretches of
the real run (``OnlineRecord.windows``). Built by analyse/measured.py (trials) and
tune/online_strategy.py (windows); ranked by analyse/evidence.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple


@dataclass(frozen=True)
class ConfigEvidence:
    config: Dict[str, Any]
    rate: Optional[float]  # batches/s it is ranked by: the steady rate, per-epoch costs charged
    rates: Tuple[float, ...]  # each measurement's rate (a trial's score, a window's batches/s)
    measurements: int  # how many stand behind ``rate`` (online: the slowest rank's count of windows)
    wait_fraction: Optional[float] = None  # the loop's data wait, the median over its measurements
    failed: bool = False  # a failure was seen at this config (it is never picked)
    source: str = "trials"  # "trials" (offline) or "run" (windows of the real run)
    steady_rate: Optional[float] = None  # the rate before per-epoch costs are charged
    startup_s: Optional[float] = None  # what starting its workers costs an epoch beyond the steady rate
    batches: int = 0  # totals over its measurements
    samples: int = 0
    wall_s: float = 0.0
    wait_s: float = 0.0
    workers_cores: Optional[float] = None  # its workers' CPU, the median over its measurements
    # What it is reported at (analyse/recommend.py): a stopwatch's rate, from the measurements made
    # after it was chosen where there are (``confirm_measurements``: the best of several noisy
    # windows reads high), and how far the measurements that figure comes from spread.
    figure_rate: Optional[float] = None  # (None: ``rate``)
    confirm_measurements: int = 0
    figure_spread: Optional[float] = None
    trial_index: Optional[int] = None  # offline: its latest trial (None: windows of the run)
    # the most threads one thread pool of a loader worker ran (analyse/pools.py; None: not read)
    pool_threads: Optional[int] = None

    @property
    def figure(self) -> Optional[float]:
        """The rate it is reported at."""
        return self.figure_rate if self.figure_rate is not None else self.rate

    @property
    def waited_share(self) -> Optional[float]:
        """The loop's data wait over all its measurements' time (else the median over them)."""
        return self.wait_s / self.wall_s if self.wall_s else self.wait_fraction

    @property
    def samples_per_batch(self) -> Optional[float]:
        return self.samples / self.batches if self.samples and self.batches else None
