"""Hand-built records for tests. A Trial's figures are its run's (store/tune.py),
so a trial with figures is built with a run that holds them."""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

from feedprof.store import Run, RunKind, Summary, Trial

PEAKS = {"peak_rss_bytes": "tree_rss_bytes", "peak_pss_bytes": "tree_pss_bytes",
         "peak_shm_used_bytes": "shm_used_bytes"}  # a Trial's name -> the run's Peaks field


def make_trial(index: int, role: Any, config: Any, state: Any, run: Optional[Run] = None,
          duration_s: Optional[float] = None, **fields: Any) -> Trial:
    """A Trial; figures among ``fields`` (batches_per_s=..., peak_rss_bytes=...)
    go into its run's summary and peaks (a run is made if none is given)."""
    summary_names = {f.name for f in dataclasses.fields(Summary)}
    figures = {k: fields.pop(k) for k in list(fields) if k in summary_names}
    peaks = {PEAKS[k]: fields.pop(k) for k in list(fields) if k in PEAKS}
    if figures or peaks or duration_s is not None:
        run = run or Run(kind=RunKind.TRIAL)
        samples = dataclasses.replace(run.samples, peaks=dataclasses.replace(run.samples.peaks, **peaks))
        run = dataclasses.replace(run, summary=dataclasses.replace(run.summary or Summary(), **figures),
                                  samples=samples, duration_s=run.duration_s if duration_s is None else duration_s)
    return Trial(index=index, role=role, config=config, state=state, run=run, **fields)
