"""What AUTOTUNE chose for a tf.data pipeline over a run (LoaderRecord.autotune): for each
op's setting, where it started, the range it moved in, where it ended, and how far AUTOTUNE
could have gone. Pure: the words are render/words/autotune.py's."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from feedprof.store.run import AutotuneReading, LoaderRecord

INPUT_BOUND = 0.05  # a run waiting for data this share of its time could use more than AUTOTUNE gave it


@dataclass(frozen=True)
class KnobOverRun:
    """One op's setting over the run."""

    position: int  # the op's place from the pipeline's source
    op: str
    knob: str
    first: float
    low: float
    high: float
    last: float
    max_value: Optional[float]  # the most AUTOTUNE may choose there
    autotuned: bool
    readings: int

    @property
    def at_its_max(self) -> bool:
        """AUTOTUNE ended at the most it may choose (parallelism: its CPU budget, the cores)."""
        return self.autotuned and self.max_value is not None and self.last >= self.max_value


def over_the_run(readings: Sequence[AutotuneReading]) -> List[KnobOverRun]:
    """Each (op, setting) of the pipeline across its readings, from the source to the output."""
    series: Dict[Tuple[int, str, str], List[float]] = {}
    last_seen: Dict[Tuple[int, str, str], Tuple[Optional[float], bool]] = {}
    for reading in readings:
        for k in reading.knobs:
            key = (k.position, k.op, k.knob)
            series.setdefault(key, []).append(k.value)
            last_seen[key] = (k.max_value, k.autotuned)
    out = []
    for key in sorted(series):
        values = series[key]
        max_value, autotuned = last_seen[key]
        out.append(KnobOverRun(position=key[0], op=key[1], knob=key[2], first=values[0], low=min(values),
                               high=max(values), last=values[-1], max_value=max_value, autotuned=autotuned,
                               readings=len(values)))
    return out


def autotuned_pipelines(loaders: Sequence[LoaderRecord]) -> List[Tuple[LoaderRecord, List[KnobOverRun]]]:
    """The run's tf.data pipelines that were read, busiest first, with their settings over the run."""
    read = [rec for rec in loaders if rec.autotune]
    return [(rec, over_the_run(rec.autotune)) for rec in sorted(read, key=lambda r: -r.batches)]


def capped_by_budget(knobs: Sequence[KnobOverRun], wait_fraction: Optional[float]) -> bool:
    """AUTOTUNE gave an op all the parallelism it may while the run still waited for data (or its
    wait was not observable): the thread-pool cap, which only a private pool lifts (offline tune)."""
    waited = wait_fraction is None or wait_fraction >= INPUT_BOUND
    return waited and any(k.knob == "parallelism" and k.at_its_max for k in knobs)
