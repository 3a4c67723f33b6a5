"""The words for what AUTOTUNE chose in a tf.data pipeline over a run (analyse/autotune.py),
for the online summary and the report."""
from __future__ import annotations

from typing import List, Optional

from feedprof.analyse.autotune import KnobOverRun, autotuned_pipelines, capped_by_budget
from feedprof.store import Run

OPS = {"ParallelMapV2": "map", "ParallelMap": "map", "MapAndBatch": "map and batch, fused by tf.data,",
       "ParallelBatch": "batch", "ParallelInterleaveV4": "interleave", "ParallelInterleaveDatasetV4": "interleave",
       "LegacyParallelInterleaveDatasetV2": "interleave", "Prefetch": "prefetch"}
KNOB_WORDS = {"parallelism": "parallel calls", "buffer_size": "buffer", "cycle_length": "cycle length"}


def _number(x: float) -> str:
    return f"{x:g}"


def _knob(k: KnobOverRun) -> str:
    what = f"{OPS.get(k.op, k.op)} ({k.op}) {KNOB_WORDS.get(k.knob, k.knob)}"
    if not k.autotuned:
        return f"{what} {_number(k.last)}, the script's own (not AUTOTUNE)"
    moved = (f"{_number(k.low)}–{_number(k.high)}, {_number(k.last)} at the end" if k.low != k.high
             else f"{_number(k.last)} throughout")
    most = ""
    if k.max_value is not None:
        most = ", the most it may choose here" if k.at_its_max else f" (it may choose up to {_number(k.max_value)})"
    return f"{what}: AUTOTUNE chose {moved}{most}"


def autotune_lines(run: Optional[Run]) -> List[str]:
    """For each tf.data pipeline read in the run: AUTOTUNE's choices beside what the run measured."""
    if run is None:
        return []
    runs = run.ranks or (run,)
    lines: List[str] = []
    s = run.summary
    wait = s.data_wait_fraction if s is not None else None
    for rec, knobs in autotuned_pipelines([loader for r in runs[:1] for loader in r.loaders]):
        if knobs:
            lines.append(f"AUTOTUNE in the tf.data pipeline at {rec.site or 'the script'}, read from the running "
                         f"pipeline over the run: {'; '.join(_knob(k) for k in knobs)}")
        if capped_by_budget(knobs, wait):
            waited = (" while the loop still waited for data" if wait is not None
                      else " (whether the loop still waited is not observable where fit pulls the batches)")
            lines.append(f"AUTOTUNE gave the pipeline all the parallel calls its CPU budget allows (one per core)"
                         f"{waited}: calls that wait on I/O are held back by tf.data's default thread pool, which "
                         "AUTOTUNE never sizes; `feedprof tune` (offline) measures a private thread pool and more "
                         "parallel calls against AUTOTUNE")
    return lines
