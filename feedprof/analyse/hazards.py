"""What more workers silently break, read off one run (pure functions).

NOTE [ Hazards in a run ]

    LoaderRecord.batch_digests (an IterableDataset's first batches)
        ─► duplicated: the batches repeat across workers, not within one
           worker's own stream ─► DuplicatedPerWorker
    Samples.worker_uss_bytes (one worker, every ~0.5 s: record/workers.py)
        ─► memory_growth: a steady rise of private memory over the window
           (copy-on-read) ─► MemoryGrows
    Samples.main_fds / worker_fds_max, fd_limit
        ─► fds_near_limit ─► OpenFilesNearLimit

A run alone can show each of these; the tune adds what only several trials
show (analyse/limits.py): an epoch that grows with the worker count, the
worker count that got killed, and projections to other worker counts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from feedprof.reasons import DuplicatedPerWorker, MemoryGrows, OpenFilesNearLimit
from feedprof.store import LoaderRecord, Run

DUP_EXCESS = 0.5  # share of batches matching across workers in step, beyond out of step
GROWTH_MIN_BYTES = 8 << 20  # a worker's USS must grow at least this much over the window,
GROWTH_MIN_SHARE = 0.05  # and by this share of where it started,
GROWTH_MIN_R = 0.8  # steadily (correlation of USS with time),
GROWTH_MIN_POINTS = 3  # over at least this many readings
GROWTH_MIN_SPAN_S = 1.0  # spanning at least this long
FDS_NEAR = 0.5  # open files past this share of RLIMIT_NOFILE are worth a warning


# ------------------------------------------------------ duplicated records


def digest_columns(digests: Sequence[str]) -> List[Tuple[str, ...]]:
    """The digests of the whole batches, then of each of their parts (record/digest.py)."""
    split = [d.split(".") for d in digests]
    n = min((len(s) for s in split), default=0)
    return [tuple(s[k] for s in split) for k in range(n)]


def in_step(column: Sequence[str], workers: int) -> Optional[Tuple[float, float]]:
    """Workers take turns (batch i comes from worker i mod N), so worker w's
    j-th batch is column[j·N + w]. (Share of the other workers' j-th batches
    equal to worker 0's j-th, share equal to its (j±1)-th): duplicated streams
    match in step; data that repeats anyway (constant, periodic) matches out
    of step as well. None: too few batches from each worker."""
    length = len(column) // workers
    if length < 2:
        return None
    streams = [column[w::workers][:length] for w in range(workers)]
    first, others = streams[0], streams[1:]
    aligned = sum(s[j] == first[j] for s in others for j in range(length)) / (len(others) * length)
    shifted = max(sum(s[j + d] == first[j + 1 - d] for s in others for j in range(length - 1))
                  for d in (0, 1)) / (len(others) * (length - 1))
    return aligned, shifted


def duplicated(rec: LoaderRecord, workers: int) -> Optional[DuplicatedPerWorker]:
    """Do ``rec``'s first batches repeat once per worker (analyse in_step)?
    The parts of a batch (labels, names) count only for a dataset whose
    workers never asked which worker they are: random augmentation can make
    whole batches differ, and a sharded dataset may repeat a part across
    workers (a line number restarting in every file)."""
    digests = rec.batch_digests
    if not rec.iterable or rec.replayed or workers < 2:
        return None
    columns = digest_columns(digests)
    for k, column in enumerate(columns if rec.worker_info_asked is False else columns[:1]):
        step = in_step(column, workers)
        if step is not None and step[0] - step[1] >= DUP_EXCESS:
            return DuplicatedPerWorker(dataset=rec.dataset, workers=workers, batches_checked=len(column),
                                       distinct_batches=len(set(column)), part=k,
                                       worker_info_asked=rec.worker_info_asked)
    return None


def complete_epoch_batches(rec: LoaderRecord) -> Optional[int]:
    """Batches in the first epoch that ended (the last record may be cut short
    by the window), None if none did."""
    e = rec.epochs
    for i in range(len(e.n_batches) - 1):
        if e.n_epochs[i] == 1:
            return e.n_batches[i]
    return None


def longest_epoch_batches(rec: LoaderRecord) -> Optional[int]:
    """The most batches one epoch delivered, ended or not (an epoch still
    running past the length of a whole epoch elsewhere is longer than it)."""
    e = rec.epochs
    return max((n for n, k in zip(e.n_batches, e.n_epochs) if k == 1), default=None)


# ----------------------------------------------------------- memory growth


@dataclass(frozen=True)
class Trend:
    slope: float  # per second
    r: float  # correlation with time
    span_s: float
    first: float
    last: float


def trend(points: Sequence[Tuple[float, float]]) -> Optional[Trend]:
    """Least-squares line through (t, value) points."""
    n = len(points)
    if n < 2:
        return None
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    stt = sum((t - mt) ** 2 for t, _ in points)
    svv = sum((v - mv) ** 2 for _, v in points)
    stv = sum((t - mt) * (v - mv) for t, v in points)
    if stt <= 0:
        return None
    r = stv / math.sqrt(stt * svv) if svv > 0 else 0.0
    return Trend(slope=stv / stt, r=r, span_s=points[-1][0] - points[0][0], first=points[0][1], last=points[-1][1])


def worker_uss_points(run: Run) -> List[Tuple[float, float]]:
    """One worker's USS readings inside the window: the worker with the most
    readings there (workers restarted each epoch start again from little)."""
    s, w = run.samples, run.window
    by_pid: dict = {}
    for t, uss, pid in zip(s.t_s, s.worker_uss_bytes, s.worker_pid):
        if not uss or pid is None:  # 0: read as the worker exited
            continue
        if (w.t_start_s is None or t >= w.t_start_s) and (w.t_end_s is None or t <= w.t_end_s):
            by_pid.setdefault(pid, []).append((t, float(uss)))
    return max(by_pid.values(), key=len, default=[])


def memory_growth(run: Run, workers: Optional[int], batches_per_s: Optional[float]) -> Optional[MemoryGrows]:
    """A worker whose private memory rises steadily through the window."""
    points = worker_uss_points(run)
    line = trend(points)
    if not workers or line is None or len(points) < GROWTH_MIN_POINTS or line.span_s < GROWTH_MIN_SPAN_S:
        return None
    grown = line.slope * line.span_s
    if line.r < GROWTH_MIN_R or grown < max(GROWTH_MIN_BYTES, GROWTH_MIN_SHARE * line.first):
        return None
    per_worker_rate = batches_per_s / workers if batches_per_s else None  # batches each worker makes per second
    return MemoryGrows(workers=workers, growth_bytes_per_s=line.slope,
                       growth_per_batch_bytes=line.slope / per_worker_rate if per_worker_rate else None,
                       window_s=line.span_s, uss_start_bytes=int(line.first), uss_end_bytes=int(line.last))


# ----------------------------------------------------------- open files


def fds_near_limit(run: Run, workers: Optional[int]) -> Optional[OpenFilesNearLimit]:
    """The busiest process's open files, if past FDS_NEAR of RLIMIT_NOFILE."""
    s = run.samples
    limit = s.fd_limit
    if not limit:
        return None
    main, worker = s.peaks.main_fds or 0, s.peaks.worker_fds or 0
    fds, process = (main, "main") if main >= worker else (worker, "worker")
    if fds < FDS_NEAR * limit:
        return None
    return OpenFilesNearLimit(fds=fds, limit_fds=limit, process=process, workers=workers or 0)


def run_hazards(run: Run, rec: Optional[LoaderRecord], workers: Optional[int],
                batches_per_s: Optional[float]) -> List:
    """Every hazard one run shows by itself (for its summary's notes)."""
    found = [duplicated(rec, workers or 0) if rec is not None else None,
             memory_growth(run, workers, batches_per_s), fds_near_limit(run, workers)]
    return [f for f in found if f is not None]
