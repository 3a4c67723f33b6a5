"""Which loader a run's window measured, and its steps inside the window: what every reading of a
run starts from (analyse/diagnose.py summarises it, analyse/stragglers.py compares the ranks')."""
from __future__ import annotations

from typing import Optional

from feedprof.analyse import stats
from feedprof.store import LoaderRecord, Run, StepLog


def training_loader(run: Run) -> Optional[LoaderRecord]:
    """The loader the window measured, else the one that delivered the most batches."""
    if run.window.loader_id is not None:
        rec = run.loader(run.window.loader_id)
        if rec is not None:
            return rec
    return max(run.loaders, key=lambda r: r.batches, default=None)


def window_steps(run: Run, rec: LoaderRecord) -> StepLog:
    """The training loader's steps inside the measured window (all of them
    for another loader, or a run without bounds)."""
    w = run.window
    if w.loader_id != rec.loader_id:
        return rec.steps
    return stats.in_window(rec.steps, w.t_start_s, w.t_end_s)
