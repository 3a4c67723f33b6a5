"""Small, dependency-free statistics for noisy throughput windows."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from feedprof.store import StepLog

DEFAULT_CHUNKS = 5
MIN_STEPS_PER_CHUNK = 8


def median(xs: Sequence[float]) -> Optional[float]:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return None
    mid = n // 2
    return s[mid] if n % 2 else 0.5 * (s[mid - 1] + s[mid])


def mean(xs: Sequence[Optional[float]]) -> Optional[float]:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def in_window(steps: StepLog, t_start_s: Optional[float], t_end_s: Optional[float]) -> StepLog:
    """The steps that ended inside (t_start_s, t_end_s] (a window starts at the
    delivery of the batch before its first step)."""
    keep = [i for i, t in enumerate(steps.t_end_s)
            if (t_start_s is None or t > t_start_s) and (t_end_s is None or t <= t_end_s)]
    if len(keep) == len(steps.t_end_s):
        return steps
    pick = lambda col: tuple(col[i] for i in keep)  # noqa: E731
    return StepLog(t_end_s=pick(steps.t_end_s), n_steps=pick(steps.n_steps), wait_s=pick(steps.wait_s),
                   wall_s=pick(steps.wall_s), cpu_s=pick(steps.cpu_s) if steps.cpu_s else ())


def chunk_rates(steps: StepLog, n_chunks: int = DEFAULT_CHUNKS,
                t_start_s: Optional[float] = None, t_end_s: Optional[float] = None) -> List[float]:
    """Steps per second in consecutive chunks of roughly equal step counts.

    Chunks of one window are what "median and spread" are taken over: a
    shared machine's hiccup lands in one chunk instead of skewing the mean.
    """
    return [rate for _, rate in chunks(steps, n_chunks, t_start_s, t_end_s)]


def chunks(steps: StepLog, n_chunks: int = DEFAULT_CHUNKS, t_start_s: Optional[float] = None,
           t_end_s: Optional[float] = None) -> List[Tuple[int, float]]:
    """(index in ``steps`` of the chunk's last record, steps per second) per chunk."""
    recs = [(i, n, w) for i, (t, n, w) in enumerate(zip(steps.t_end_s, steps.n_steps, steps.wall_s))
            if (t_start_s is None or t > t_start_s) and (t_end_s is None or t <= t_end_s)]
    total = sum(n for _, n, _ in recs)
    if total == 0:
        return []
    n_chunks = max(1, min(n_chunks, total // MIN_STEPS_PER_CHUNK, len(recs)))
    per_chunk = total / n_chunks
    out: List[Tuple[int, float]] = []
    n_acc, wall_acc, seen = 0, 0.0, 0
    for i, n, w in recs:
        n_acc += n
        wall_acc += w
        seen += n
        if seen >= per_chunk * (len(out) + 1) - 1e-9 and len(out) < n_chunks - 1:
            out.append((i, n_acc / wall_acc if wall_acc > 0 else float("inf")))
            n_acc, wall_acc = 0, 0.0
    if n_acc:
        out.append((recs[-1][0], n_acc / wall_acc if wall_acc > 0 else float("inf")))
    return out


def spread(rates: Sequence[float]) -> Tuple[Optional[float], Optional[float], Optional[float]]:
    """(median, low, high) of chunk rates."""
    if not rates:
        return None, None, None
    return median(rates), min(rates), max(rates)


def window_mean(t_s: Sequence[float], values: Sequence[Optional[float]],
                t_start_s: Optional[float], t_end_s: Optional[float]) -> Optional[float]:
    """Mean of the readings inside [t_start_s, t_end_s] (all of them if unbounded)."""
    picked = [v for t, v in zip(t_s, values)
              if v is not None and (t_start_s is None or t >= t_start_s) and (t_end_s is None or t <= t_end_s)]
    return sum(picked) / len(picked) if picked else None
