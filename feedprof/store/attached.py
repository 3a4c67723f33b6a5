"""What ``feedprof attach PID`` read of a job it did not start (trial/attach.py): its threads'
stacks sampled from outside, so its figures are shares of samples, with their sampling noise,
not timings. Same rules as every record here: frozen, plain data, ``None`` means "not known"."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from feedprof.store.loading import LoadingLine


@dataclass(frozen=True)
class ProcessWait:
    """Where one process of a stopped loop waits: its thread's innermost frame of the user's code
    (``site`` "": none, the library function it is in), computing or not, and its stack."""

    pid: int
    role: str  # "training" | "worker"
    site: str  # "dataset.py:42"
    function: str
    active: bool  # computing (py-spy: not idle) in most of its samples
    stack: Tuple[str, ...] = ()  # "file:line function", outermost first
    worker_id: Optional[int] = None  # the loader's worker this is (from the order its pids were seen)


@dataclass(frozen=True)
class AttachedInfo:
    sampler: str  # the sampler that read the job ("py-spy 0.4.3")
    rate_hz: int
    window_s: float
    samples: int  # of the training thread
    wait_share: Optional[float]  # of its samples, inside the loader's __next__
    wait_noise: Optional[float]  # ± one standard error of that share (binomial)
    pid: int
    command: Tuple[str, ...] = ()  # the job's command line (/proc/PID/cmdline)
    cwd: str = ""
    advanced: Optional[bool] = None  # did the loop get a batch in the window (False: it is stuck)
    rest: Tuple[LoadingLine, ...] = ()  # where the training thread's time outside the loader went
    waits: Tuple[ProcessWait, ...] = ()  # a loop that did not advance: where each process waits
    unknown: Tuple[str, ...] = ()  # loader settings that cannot be read from outside
    rank_pids: Tuple[int, ...] = ()  # a launcher attached to: the ranks found below it
