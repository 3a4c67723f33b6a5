"""Hand-built records for tests. A Trial's figures are its run's (store/tune.py),
so a trial with figures is built with a run that holds them."""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

from feedprof.store import Run, RunKind, Summary, Trial, TuneResult

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


TORCH_OWN = {"num_workers": 0, "prefetch_factor": None, "pin_memory": False, "persistent_workers": False}


def make_online_result(rates_by_workers: Any, switched_at_end: Optional[int] = None) -> TuneResult:
    """An online tune's record (tune --online) of a torch loader written with 0 workers: for each
    worker count, a window of the real run per rate given (1 s each, one after the other), a switch
    to it before its first window, its evidence from those windows; ``switched_at_end``: one more
    switch, to that count, as the run ended (no window of it)."""
    from feedprof.store import ConfigEvidence
    from feedprof.store import Framework, Recommendation
    from feedprof.store.online import OnlineRecord, OnlineSwitch, OnlineWindow

    def config(n: int) -> dict:
        return {**TORCH_OWN, "num_workers": n, "prefetch_factor": 2 if n else None}

    windows, switches, evidence, t = [], [], [], 0.0
    for n, rates in rates_by_workers.items():
        switches.append(OnlineSwitch(rank=0, t_s=t, config=config(n), why="baseline" if not n else "climb"))
        for rate in rates:
            windows.append(OnlineWindow(rank=0, config=config(n), batches=round(rate), samples=32 * round(rate),
                                        wait_s=0.5 if not n else 0.05, t_start_s=t, t_end_s=t + 1.0))
            t += 1.0
        evidence.append(ConfigEvidence(config=config(n), rate=sum(rates) / len(rates), rates=tuple(rates),
                                       measurements=len(rates), source="run", batches=round(sum(rates)),
                                       wall_s=float(len(rates))))
    if switched_at_end is not None:
        switches.append(OnlineSwitch(rank=0, t_s=t, config=config(switched_at_end), why="climb"))
    best = max(evidence, key=lambda e: e.rate or 0.0)
    rec = Recommendation(framework=Framework.TORCH, config=best.config, baseline_config=config(0),
                         baseline_batches_per_s=evidence[0].rate, batches_per_s=best.rate)
    online = OnlineRecord(explore_budget_s=60.0, explored_s=t, windows=tuple(windows), switches=tuple(switches),
                          workers_changed=True, exit_code=0)
    return TuneResult(script="train.py", framework=Framework.TORCH, complete=True, recommendation=rec,
                      evidence=tuple(evidence), online=online)
