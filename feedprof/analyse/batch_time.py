"""Where a batch's time goes: the training loop's time per batch split into parts that add up to
it, each measured, each with its noise (store/batch_time.py names them).

NOTE [ Where a batch's time goes ]

    a config's window (StepLog): per step its wall time, its wait in the loader's __next__, and
    the training thread's CPU time in there (record/steps.py)
      blocked       = (wait - CPU in __next__) per batch: the loop waited for a batch
      loop_loading  = CPU in __next__ per batch: the training process's own loading work
      step          = (wall - wait) per batch: the step, and whatever else the loop does
    the step alone, from another measurement with nothing loading beside the step:
      the compute ceiling (one batch replayed: its step per batch), where it bounds anything
      (analyse/ceiling.py); else the script's own settings at 0 workers (the loop loads between
      steps, never beside them)
      step = step_alone + slowdown: the same step, slower beside the workers
    the slowdown, by the training process's CPU and its wait for a CPU (the sampler's means over each
    window, cores x seconds a batch; its CPU less its own loading work is the step's) against the
    run the step alone comes from:
      slowdown_runq = its wait for a CPU a batch, beside less alone: the workers took the cores
      slowdown_cpu  = the step's CPU a batch, beside less alone: more work in each step
      slowdown_wait = the rest: the step waits on neither (the device, a copy to it, a lock)
    noise: each part computed per chunk of the window (analyse/stats.chunks), half its range
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

from feedprof.analyse import stats
from feedprof.analyse.diagnose import training_loader, window_steps, workers_of
from feedprof.store import BatchTime, Run, StepLog, TimePart


@dataclass(frozen=True)
class StepAlone:
    """The step with nothing loading beside it, seconds per batch, and what measured it; with the
    training process's CPU in the step and its wait for a CPU, a batch, where they were sampled."""

    s: float
    source: str  # "ceiling" | "no_workers"
    spread_s: Optional[float] = None
    cpu_s: Optional[float] = None
    runq_s: Optional[float] = None


def _main_process(run: Run, f: dict) -> Tuple[Optional[float], Optional[float]]:
    """(the step's CPU a batch: the training process's CPU less its own loading work, its wait for
    a CPU a batch), from the sampler's means over the window (None: not sampled)."""
    s = run.summary
    if s is None or s.main_cpu_pct is None:
        return None, None
    cpu = max(0.0, s.main_cpu_pct / 100 * f["batch"] - f.get("loop_loading", 0.0))
    runq = s.main_runq_pct / 100 * f["batch"] if s.main_runq_pct is not None else None
    return cpu, runq


def _totals(steps: StepLog, lo: int, hi: int) -> Tuple[int, float, float, Optional[float]]:
    """(steps, wall, wait, CPU in __next__ or None) of records lo..hi-1."""
    n = sum(steps.n_steps[lo:hi])
    cpu = sum(steps.cpu_s[lo:hi]) if steps.cpu_s else None
    return n, sum(steps.wall_s[lo:hi]), sum(steps.wait_s[lo:hi]), cpu


def _per_batch(n: int, wall: float, wait: float, cpu: Optional[float]) -> dict:
    if n <= 0:
        return {}
    own = min(max(cpu, 0.0), wait) if cpu is not None else None
    out = {"batch": wall / n, "step": max(0.0, wall - wait) / n}
    if own is not None:
        out.update(blocked=(wait - own) / n, loop_loading=own / n)
    else:
        out.update(blocked=wait / n)
    return out


def chunk_bounds(steps: StepLog, n_chunks: int = stats.DEFAULT_CHUNKS) -> List[Tuple[int, int]]:
    """(first, last + 1) record indices of each chunk of the window (stats.chunks' chunks)."""
    bounds, lo = [], 0
    for last, _ in stats.chunks(steps, n_chunks):
        bounds.append((lo, last + 1))
        lo = last + 1
    return bounds


def _spreads(steps: StepLog) -> dict:
    """Half the range over the window's chunks of each per-batch figure (seconds)."""
    per_chunk = [_per_batch(*_totals(steps, lo, hi)) for lo, hi in chunk_bounds(steps)]
    out = {}
    for key in ("batch", "step", "blocked", "loop_loading"):
        values = [c[key] for c in per_chunk if key in c]
        if len(values) >= 2:
            out[key] = (max(values) - min(values)) / 2
    return out


def step_parts(steps: StepLog) -> Optional[dict]:
    """The per-batch figures of a window, and their spreads: {"batch", "step", "blocked",
    ["loop_loading"], "spread": {...}} (None: no steady step)."""
    figures = _per_batch(*_totals(steps, 0, len(steps.n_steps)))
    if not figures:
        return None
    return {**figures, "spread": _spreads(steps)}


def batch_time(run: Optional[Run], role: str, alone: Optional[StepAlone] = None,
               config: Optional[dict] = None) -> Optional[BatchTime]:
    """Where a batch's time goes in ``run``'s measured window (``alone``: the step with nothing
    loading beside it, measured elsewhere)."""
    rec = training_loader(run) if run is not None else None
    if rec is None:
        return None
    steps = window_steps(run, rec)
    f = step_parts(steps)
    if f is None:
        return None
    spread = f["spread"]
    parts = [TimePart("blocked", f["blocked"], spread.get("blocked"))]
    if "loop_loading" in f:
        parts.append(TimePart("loop_loading", f["loop_loading"], spread.get("loop_loading")))
    parts += _step(f["step"], spread.get("step"), alone, *_main_process(run, f))
    return BatchTime(config=dict(config if config is not None else rec.config), role=role, batch_s=f["batch"],
                     parts=tuple(parts), step_alone_from=alone.source if alone is not None else "",
                     batches=sum(steps.n_steps))


def _step(step_s: float, spread_s: Optional[float], alone: Optional[StepAlone], cpu_s: Optional[float] = None,
          runq_s: Optional[float] = None) -> List[TimePart]:
    """The step, split into the step alone and its slowdown where the step alone was measured (a
    step that ran no slower than alone is all step alone: no negative slowdown), the slowdown split
    by the training process's CPU and its wait for a CPU where both runs sampled them."""
    if alone is None:
        return [TimePart("step", step_s, spread_s)]
    base = min(alone.s, step_s)
    noise = None if spread_s is None and alone.spread_s is None else (spread_s or 0.0) + (alone.spread_s or 0.0)
    slowdown = step_s - base
    parts = [TimePart("step_alone", base, alone.spread_s)]
    if None in (cpu_s, runq_s, alone.cpu_s, alone.runq_s):
        return parts + [TimePart("slowdown", slowdown, noise)]
    runq = min(slowdown, max(0.0, runq_s - alone.runq_s))
    cpu = min(slowdown - runq, max(0.0, cpu_s - alone.cpu_s))
    return parts + [TimePart("slowdown_runq", runq), TimePart("slowdown_cpu", cpu),
                    TimePart("slowdown_wait", slowdown - runq - cpu, noise)]


def step_alone_of(run: Optional[Run], source: str) -> Optional[StepAlone]:
    """The step per batch of a run in which nothing loaded beside it (a ceiling's replay, a run at
    0 workers)."""
    rec = training_loader(run) if run is not None else None
    if rec is None:
        return None
    f = step_parts(window_steps(run, rec))
    if f is None:
        return None
    cpu, runq = _main_process(run, f)
    return StepAlone(s=f["step"], source=source, spread_s=f["spread"].get("step"), cpu_s=cpu, runq_s=runq)


def loads_beside_the_step(run: Optional[Run]) -> bool:
    """Does the training loader load while the step runs (workers, a prefetch buffer, a queue)? At 0
    workers the loop loads between its steps. (Unknown: assumed it does.)"""
    rec = training_loader(run) if run is not None else None
    if rec is None:
        return True
    return bool(rec.in_flight or workers_of(rec.config))


def profile_batch_time(run: Run) -> Optional[BatchTime]:
    """A single observed run (feedprof profile): at 0 workers the step runs alone by construction;
    with workers the step alone was not measured here (a tune measures it)."""
    if training_loader(run) is None:
        return None
    alone = None if loads_beside_the_step(run) else step_alone_of(run, "no_workers")
    return batch_time(run, "run", alone)


def _window_figures(windows: Sequence[Any]) -> Optional[dict]:
    """Per-batch figures over stretches of the real run (online windows: batches, wall_s, wait_s,
    load_cpu_s), with half their range over the windows as the spread."""
    totals = [(w.batches, w.wall_s, w.wait_s, w.load_cpu_s) for w in windows if w.batches > 0]
    if not totals:
        return None
    n, wall, wait, cpu = (sum(col) for col in zip(*totals))
    f = _per_batch(n, wall, wait, cpu)
    each = [_per_batch(*t) for t in totals]
    f["spread"] = {k: (max(c[k] for c in each) - min(c[k] for c in each)) / 2
                   for k in ("batch", "step", "blocked", "loop_loading") if len(each) >= 2}
    f["batches"] = n
    return f


def windows_batch_time(windows: Sequence[Any], config: dict, role: str,
                       alone: Optional[StepAlone] = None) -> Optional[BatchTime]:
    """Where a batch's time goes over the windows of one config of the real run (tune --online)."""
    f = _window_figures(windows)
    if f is None:
        return None
    spread = f["spread"]
    parts = [TimePart("blocked", f["blocked"], spread.get("blocked")),
             TimePart("loop_loading", f["loop_loading"], spread.get("loop_loading"))]
    parts += _step(f["step"], spread.get("step"), alone)
    return BatchTime(config=dict(config), role=role, batch_s=f["batch"], parts=tuple(parts),
                     step_alone_from=alone.source if alone is not None else "", batches=f["batches"])


def windows_step_alone(windows: Sequence[Any]) -> Optional[StepAlone]:
    """The step per batch over windows with no workers loading beside it."""
    f = _window_figures(windows)
    return None if f is None else StepAlone(s=f["step"], source="no_workers", spread_s=f["spread"].get("step"))
