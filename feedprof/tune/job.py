"""What a tune is asked to do (the job, its options) and how it ends early
(an error that keeps what was measured, an interruption)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from feedprof import defaults
from feedprof.store.reasons import Reason
from feedprof.store import TuneResult
from feedprof.trial.launch import Launch


@dataclass
class TuneOptions:
    budget_s: float = defaults.TUNE_BUDGET_S
    max_workers: Optional[int] = None  # default: max(32, 2 × usable CPUs)
    loader_site: Optional[str] = None  # FILE:LINE of the loader to tune (default: the busiest)
    window_seconds: float = defaults.TUNE_WINDOW.seconds  # steady state measured per trial
    window_batches: int = defaults.TUNE_WINDOW.batches
    min_window_batches: int = defaults.TUNE_WINDOW.min_batches  # enough for a spread over chunks
    warmup_batches: int = defaults.TUNE_WINDOW.warmup_batches
    interval_s: float = defaults.INTERVAL_S
    gpu: bool = True
    loader_timeout_s: float = defaults.LOADER_TIMEOUT_S
    trial_timeout_s: Optional[float] = None  # default: 4 × the baseline trial, at least 30 s
    tolerance: float = defaults.TOLERANCE
    fork_trials: bool = True  # fork trials from a process that imported the framework once (zygote.py)
    max_memory_bytes: Optional[int] = None  # RAM the job may use (default: 80 % of what is free, or its container's)
    allow_reorder: bool = False  # --allow-reorder: settings that change the order of samples may be recommended


class TuneError(Exception):
    """The tune could not go on; ``result`` holds what was measured."""

    def __init__(self, reason: Reason, result: TuneResult, exit_code: int = 1):
        super().__init__(reason.code)
        self.reason = reason
        self.result = result
        self.exit_code = exit_code


class TuneInterrupted(Exception):
    def __init__(self, result: TuneResult):
        super().__init__("interrupted")
        self.result = result


@dataclass(frozen=True)
class TuneJob:
    """What to tune, and where its files go."""

    script: str  # "" for a multi-process job: its launch command says what runs
    out_dir: str
    argv: Tuple[str, ...] = ()
    launch: Optional[Launch] = None  # a multi-process job: its own launch command (jobrunner.py)
    previous: Optional[TuneResult] = None  # --resume: its trials are told to the strategy again, not re-run
