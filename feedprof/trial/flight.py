"""A trial in flight: one frozen record of what was launched, where its files
are, when it started, and the handles on its processes (the child or the
launcher, its watch, its sampler). runner.py and jobrunner.py fill it in as
each part starts, so that an interrupt at any point reaps what exists, and
hand it whole to the code that ends the trial and puts its Run together.

    TrialPaths.fresh ─► spec written ─► InFlight.begin (started_at, origin_s, launched_s, others)
      ─► launched (proc, out) ─► watched (watch) ─► sampled (sampler) ─► the Run
"""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

from feedprof.record.clock import Clock, now_iso
from feedprof.record.leftovers import process_clock_s
from feedprof.record.others import OtherLoad
from feedprof.record.sampler import Sampler
from feedprof.store import HostInfo, Run
from feedprof.trial.options import TrialOptions
from feedprof.trial.protocol import DECISION_FILE
from feedprof.trial.watch import Watch

RANK = "{rank}"  # a job's per-rank files: each rank fills in its own number (hosted.py)


class TrialInterrupted(BaseException):
    """The parent was told to stop (SIGINT/SIGTERM) during a trial."""

    def __init__(self, run: Optional[Run], signum: int):
        super().__init__(signum)
        self.run = run
        self.signum = signum


@dataclass(frozen=True)
class TrialPaths:
    """A trial's files, in its own directory (``directory`` as the caller gave it:
    the trial's processes carry it in their environment, record/leftovers.py)."""

    directory: str
    spec: str
    result: str
    events: str
    log: str

    @classmethod
    def fresh(cls, trial_dir: str, per_rank: bool = False) -> "TrialPaths":
        """The directory made, and a previous run's results and events removed
        (``per_rank``: a job's, one result and one event file per rank)."""
        os.makedirs(trial_dir, exist_ok=True)
        suffix = f"-{RANK}" if per_rank else ""
        paths = cls(trial_dir, *(os.path.join(trial_dir, name) for name in (
            "spec.json", f"result{suffix}.json", f"events{suffix}.jsonl", "output.log")))
        if per_rank:
            stale = glob.glob(paths.result.replace(RANK, "*")) + glob.glob(paths.events.replace(RANK, "*"))
        else:
            stale = [p for p in (paths.result, paths.events) if os.path.exists(p)]
        stale += glob.glob(os.path.join(trial_dir, "loading-*.json"))  # record/loadprof.py's, per process
        for path in stale:
            os.remove(path)
        return paths

    @property
    def decision(self) -> str:
        """Online mode: the parent's decisions, beside the spec (trial/protocol.py)."""
        return os.path.join(os.path.dirname(self.spec), DECISION_FILE)


@dataclass(frozen=True)
class InFlight:
    """One trial from its launch until its Run is put together."""

    script: Optional[str]  # the user's script (a job: the launcher's, where it names one)
    argv: Tuple[str, ...]  # its arguments (a job: the whole launch command)
    paths: TrialPaths
    host: HostInfo
    opts: TrialOptions
    clock: Clock
    origin_s: float  # the trial's time zero, on ``clock`` (the child's events count from it)
    started_at: str  # the wall-clock time, for people
    launched_s: float  # on the process clock: what started after it and is left over is the trial's
    others: OtherLoad  # the machine's other processes, from the start
    proc: Any = None  # the child (Popen or a zygote's ForkedTrial), or the job's launcher
    out: Any = None  # the file the output goes to, when it is captured
    watch: Optional[Watch] = None
    sampler: Optional[Sampler] = None

    @classmethod
    def begin(cls, script: Optional[str], argv: Sequence[str], paths: TrialPaths, host: HostInfo,
              opts: TrialOptions, clock: Clock, origin_s: float) -> "InFlight":
        """Stamped just before the launch."""
        started_at = now_iso(clock)
        others = OtherLoad(clock)
        return cls(script=script, argv=tuple(argv), paths=paths, host=host, opts=opts, clock=clock,
                   origin_s=origin_s, started_at=started_at, launched_s=process_clock_s(), others=others)

    def duration_s(self) -> float:
        """Seconds since the trial's time zero, on its clock."""
        return self.clock.now_s() - self.origin_s
