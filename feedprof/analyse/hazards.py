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

from typing import Dict, List, Optional, Sequence, Tuple

from feedprof.store.reasons import DuplicatedPerWorker, MemoryGrows, OpenFilesNearLimit
from feedprof.store import LoaderRecord, Run

DUP_EXCESS = 0.5  # share of batches matching across workers in step, beyond out of step
GROWTH_MIN_BYTES = 8 << 20  # workers' USS must grow at least this much over the windows,
GROWTH_MIN_SHARE = 0.05  # and by this share of where it started,
GROWTH_STEP_BYTES = 512 << 10  # a step between two readings this big is a rise,
GROWTH_MIN_RISING = 0.8  # and this share of the steps must rise,
GROWTH_MIN_STEPS = 2  # over at least this many steps (three readings, or two trials of two)
GROWTH_MIN_SPAN_S = 0.5  # spanning at least this long
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


def worker_uss_series(run: Run) -> List[List[Tuple[float, float]]]:
    """The followed workers' USS readings inside the window, one series per
    worker (a worker restarted each epoch starts again from little)."""
    s, w = run.samples, run.window
    by_pid: Dict[int, List[Tuple[float, float]]] = {}
    for t, uss, pid in zip(s.t_s, s.worker_uss_bytes, s.worker_pid):
        if not uss or pid is None:  # 0: read as the worker exited
            continue
        if (w.t_start_s is None or t >= w.t_start_s) and (w.t_end_s is None or t <= w.t_end_s):
            by_pid.setdefault(pid, []).append((t, float(uss)))
    return list(by_pid.values())


GrowthRun = Tuple[Run, int, Optional[float]]  # a run, its workers, its batches/s


def memory_growth(runs: Sequence[GrowthRun]) -> Optional[MemoryGrows]:
    """Workers whose private memory rises steadily through the measured windows.

    Readings are ~0.25-0.5 s apart, so a short window holds two or three: the
    steps between consecutive readings of the same worker are pooled over
    every run given (the trials of a tune). Most steps must rise, and the rises
    must add up to real growth; a worker that grew at start-up and then held
    still (an index loaded at its first batch, before the window) does not."""
    steps: List[Tuple[float, float, Optional[float]]] = []  # (seconds, bytes, batches that worker made)
    longest: List[Tuple[float, float]] = []
    shown = 0
    for run, workers, batches_per_s in runs:
        for points in (worker_uss_series(run) if workers else ()):
            if len(points) > len(longest):
                longest, shown = points, workers
            for (t0, u0), (t1, u1) in zip(points, points[1:]):
                steps.append((t1 - t0, u1 - u0, (t1 - t0) * batches_per_s / workers if batches_per_s else None))
    span, grown = sum(dt for dt, _, _ in steps), sum(du for _, du, _ in steps)
    if len(steps) < GROWTH_MIN_STEPS or span < GROWTH_MIN_SPAN_S or grown <= 0:
        return None
    rising = sum(du >= GROWTH_STEP_BYTES for _, du, _ in steps) / len(steps)
    if rising < GROWTH_MIN_RISING or grown < max(GROWTH_MIN_BYTES, GROWTH_MIN_SHARE * longest[0][1]):
        return None
    made = [b for _, _, b in steps]
    per_batch = grown / sum(made) if all(b is not None for b in made) and sum(made) > 0 else None
    return MemoryGrows(workers=shown, growth_bytes_per_s=grown / span, growth_per_batch_bytes=per_batch,
                       window_s=span, uss_start_bytes=int(longest[0][1]), uss_end_bytes=int(longest[-1][1]))


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
             memory_growth([(run, workers or 0, batches_per_s)]), fds_near_limit(run, workers)]
    return [f for f in found if f is not None]
