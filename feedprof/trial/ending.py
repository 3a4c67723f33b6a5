"""How a trial that did not end well ended: the child's own word (its
result.json), its exit status, the runner's limits and its output's last
lines, made into one Outcome; a kill's cause gets the figures the trial
measured (failures.py reads the text, this module weighs it all)."""
from __future__ import annotations

import dataclasses
import os
import signal
from typing import Optional

from feedprof.store.reasons import (ExitedWithCode, Interrupted, KilledBySignal, OutOfMemoryKilled, Reason,
                              SharedMemoryExhausted, TooManyOpenFiles)
from feedprof.record.host import memory_limit_bytes
from feedprof.store import HostInfo, Outcome, Samples, TrialState
from feedprof.trial.failures import cause_of_text


def log_tail(path: str, n_bytes: int = 4000) -> str:
    """The last ``n_bytes`` of the trial's output ("" if there is none)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - n_bytes))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _signal_name(sig: int) -> str:
    return signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"


def classify_end(child: Optional[Outcome], returncode: Optional[int], timed_out: Optional[Reason],
                 interrupted: bool, log_tail: str = "") -> Outcome:
    """Name how a trial ended that did not end well (the cause carries the figures)."""
    tb = child.traceback if child else ""
    if interrupted:
        return Outcome(state=TrialState.INTERRUPTED, cause=Interrupted(), exit_code=returncode)
    if timed_out is not None:
        return Outcome(state=TrialState.TIMEOUT, cause=timed_out, exit_code=returncode)
    text = " ".join(filter(None, [getattr(child.cause, "error", "") if child else "", tb, log_tail]))
    known = cause_of_text(text)
    # a worker the kernel killed surfaces as the script's error; a script that
    # wrote no result says in its output what it died of
    if known is not None and (known[0] == TrialState.KILLED or child is None):
        return Outcome(state=known[0], cause=known[1], exit_code=returncode,
                       traceback=tb if known[0] == TrialState.KILLED else tb or log_tail)
    if child is not None:
        return dataclasses.replace(child, exit_code=returncode)
    if returncode is not None and returncode < 0:
        sig = -returncode
        name = _signal_name(sig)
        cause = {signal.SIGKILL: OutOfMemoryKilled(signal=name),
                 signal.SIGBUS: SharedMemoryExhausted(signal=name)}.get(sig, KilledBySignal(signal=name))
        return Outcome(state=TrialState.KILLED, cause=cause, exit_code=returncode)
    last = log_tail.strip().splitlines()[-1] if log_tail.strip() else ""
    return Outcome(state=TrialState.FAILED, cause=ExitedWithCode(exit_code=returncode, last_line=last),
                   exit_code=returncode, traceback=log_tail)


def with_figures(outcome: Outcome, samples: Optional[Samples], host: HostInfo) -> Outcome:
    """A kill's or a hazard's cause, with what this trial measured (None where
    nothing was): memory per worker, /dev/shm, open files."""
    cause = outcome.cause
    if samples is None or not isinstance(cause, (OutOfMemoryKilled, SharedMemoryExhausted, TooManyOpenFiles)):
        return outcome
    p = samples.peaks
    workers = p.n_workers or None
    if isinstance(cause, OutOfMemoryKilled):
        worker = max((b for b in (p.worker_pss_bytes, *samples.worker_pss_bytes) if b is not None), default=None)
        cause = dataclasses.replace(cause, workers=workers, worker_pss_bytes=worker,
                                    tree_pss_bytes=p.tree_pss_bytes or p.tree_rss_bytes,
                                    ram_bytes=memory_limit_bytes() or host.ram_bytes or None)
    elif isinstance(cause, SharedMemoryExhausted):
        cause = dataclasses.replace(cause, workers=workers, shm_total_bytes=host.shm_total_bytes,
                                    shm_peak_bytes=p.shm_used_bytes)
    else:
        cause = dataclasses.replace(cause, workers=workers, limit_fds=samples.fd_limit, main_fds=p.main_fds,
                                    worker_fds=p.worker_fds)
    return dataclasses.replace(outcome, cause=cause)
