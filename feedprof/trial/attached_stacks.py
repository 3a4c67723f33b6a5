"""A job's stacks, read from outside (record/pyspy.py), as the figures a profile has: the training
thread's wait inside the loader's __next__, where the rest of its time went, where the loader's
workers spend theirs (the user's lines, as the loading profile attributes them), and, where the loop
did not advance, where each process waits. Pure functions over the stacks: no process is read here.

A sample stands for 1 / rate seconds. The wait is a share of samples: its noise is a binomial's,
sqrt(p (1 - p) / n), said beside it.
"""
from __future__ import annotations

import math
import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from feedprof.record.pyspy import Frame, ThreadStacks
from feedprof.store import LoadingLine, LoadingProfile
from feedprof.store.attached import ProcessWait

NEXT = "_BaseDataLoaderIter.__next__"  # the loop asks for a batch (torch/utils/data/dataloader.py)
WORKER_LOOP = "_worker_loop"  # a DataLoader worker's loop (torch/utils/data/_utils/worker.py)
FETCH = ("_MapDatasetFetcher.fetch", "_IterableDatasetFetcher.fetch")  # a worker loads a batch
TORCH_DATA = os.sep.join(("torch", "utils", "data"))
STUCK_SHARE = 0.99  # the training thread inside __next__ this share of its samples, and ...
STUCK_STACKS = 2  # ... each waiting thread on at most this many distinct stacks: the loop did not advance
MAX_LINES = 50
Stacks = Dict[Tuple[Frame, ...], List[int]]


def _is(frame: Frame, names: Iterable[str]) -> bool:
    return frame[0] in names and TORCH_DATA in frame[1]


def in_next(frames: Sequence[Frame]) -> Optional[int]:
    """Where the loader's __next__ is in a stack (outermost first), or None."""
    return next((i for i, f in enumerate(frames) if _is(f, (NEXT,))), None)


def is_worker(t: ThreadStacks) -> bool:
    return t.tid == t.pid and any(_is(f, (WORKER_LOOP,)) for frames in t.stacks for f in frames)


def training_thread(threads: Iterable[ThreadStacks], pid: int) -> Optional[ThreadStacks]:
    """The thread of ``pid`` that asks the loader for batches most (its main thread where none does)."""
    mine = [t for t in threads if t.pid == pid]
    asking = [(sum(c[0] for frames, c in t.stacks.items() if in_next(frames) is not None), t) for t in mine]
    best = max(asking, key=lambda x: x[0], default=(0, None))
    if best[1] is not None and best[0] > 0:
        return best[1]
    return next((t for t in mine if t.tid == pid), None)


def workers_of(threads: Iterable[ThreadStacks], pid: int) -> List[ThreadStacks]:
    """The loader workers below ``pid``: processes whose main thread runs torch's worker loop."""
    return sorted((t for t in threads if is_worker(t) and pid in t.parents), key=lambda t: t.pid)


def wait_share(t: ThreadStacks) -> Tuple[Optional[float], Optional[float]]:
    """(the share of the thread's samples inside __next__, its standard error)."""
    n = t.samples
    if not n:
        return None, None
    p = sum(c[0] for frames, c in t.stacks.items() if in_next(frames) is not None) / n
    return p, math.sqrt(p * (1 - p) / n)


class UserFiles:
    """Which files are the job's own: under its script's folder or its working directory, not a
    library's (site-packages, the standard library)."""

    def __init__(self, roots: Sequence[str]):
        self.roots = [os.path.abspath(r) for r in roots if r]

    def __call__(self, path: str) -> bool:
        if path.startswith("<") or "site-packages" in path or "dist-packages" in path or f"{os.sep}lib{os.sep}python3" in path:
            return False
        return any(os.path.abspath(path).startswith(r + os.sep) for r in self.roots)

    def shown(self, path: str) -> str:
        for r in self.roots:
            if os.path.abspath(path).startswith(r + os.sep):
                return os.path.relpath(path, r)
        return path


def innermost_user(frames: Sequence[Frame], user: UserFiles) -> Tuple[str, str]:
    """(site, function) of the innermost frame of the user's code (library frames below it fold into
    it); with none, ("", the library function the stack ends in)."""
    for func, path, line in reversed(frames):
        if user(path):
            return f"{user.shown(path)}:{line}", func
    return ("", frames[-1][0]) if frames else ("", "")


def _lines(stacks: Iterable[Tuple[Tuple[Frame, ...], List[int]]], user: UserFiles, interval_s: float) -> List[LoadingLine]:
    cells: Dict[Tuple[str, str], List[float]] = {}
    for frames, (n, active) in stacks:
        cell = cells.setdefault(innermost_user(frames, user), [0.0, 0.0])
        cell[0] += n * interval_s
        cell[1] += min(active, n) * interval_s
    top = sorted(cells.items(), key=lambda kv: -kv[1][0])[:MAX_LINES]
    return [LoadingLine(site=site, function=fn, wall_s=w, cpu_s=c) for (site, fn), (w, c) in top]


def rest_of(t: ThreadStacks, user: UserFiles, interval_s: float) -> Tuple[LoadingLine, ...]:
    """Where the training thread's time outside the loader went, by the user's lines (the step, a
    copy, logging, a checkpoint)."""
    return tuple(_lines(((f, c) for f, c in t.stacks.items() if in_next(f) is None), user, interval_s))


def loading_of(workers: Sequence[ThreadStacks], training: Optional[ThreadStacks], user: UserFiles,
               interval_s: float) -> Optional[LoadingProfile]:
    """The loading code's time by the user's lines: the workers' samples inside a fetch, or, where
    the loop loads itself (no workers), the training thread's inside __next__."""
    if workers:
        stacks = [(f[next(i for i, x in enumerate(f) if _is(x, FETCH)):], c) for t in workers for f, c in t.stacks.items()
                  if any(_is(x, FETCH) for x in f)]
    elif training is not None:
        stacks = [(f[in_next(f):], c) for f, c in training.stacks.items() if in_next(f) is not None]
    else:
        return None
    if not stacks:
        return None
    lines = _lines(stacks, user, interval_s)
    wall = sum(line.wall_s for line in lines)
    cpu = sum(line.cpu_s for line in lines)
    return LoadingProfile(dataset="(attached)", calls=0, wall_s=wall, cpu_s=cpu, sampled_s=wall, interval_s=interval_s,
                          processes=max(1, len(workers)), in_main=not workers, sampler_cpu_s=0.0, source="attached",
                          lines=tuple(lines))


def advanced(training: ThreadStacks, workers: Sequence[ThreadStacks]) -> Optional[bool]:
    """Did the loop get a batch in the window? False where the training thread spent it all inside
    __next__ and every thread it waits on stayed on one or two stacks (a loader that works moves
    through its dataset's lines, its collate and its queue; one stuck on a lock does not)."""
    share, _ = wait_share(training)
    if share is None:
        return None
    if share < STUCK_SHARE:
        return True
    waiting = list(workers) or [training]
    return any(len([c for c in t.stacks.values() if c[0]]) > STUCK_STACKS for t in waiting)


def waits_of(training: ThreadStacks, workers: Sequence[ThreadStacks], user: UserFiles) -> Tuple[ProcessWait, ...]:
    """Where each process of a stopped loop waits: its most sampled stack."""
    out = []
    for role, t, k in [("training", training, None)] + [("worker", w, k) for k, w in enumerate(workers)]:
        frames, (n, active) = max(t.stacks.items(), key=lambda kv: kv[1][0])
        site, function = innermost_user(frames, user)
        out.append(ProcessWait(pid=t.pid, role=role, site=site, function=function, active=active * 2 > n,
                               stack=tuple(f"{user.shown(p)}:{line} {fn}" for fn, p, line in frames),
                               worker_id=k))
    return tuple(out)


def pin_memory_thread(threads: Iterable[ThreadStacks], pid: int) -> bool:
    """Does the training process run torch's pin-memory thread (pin_memory=True)?"""
    return any(t.pid == pid and any("_pin_memory_loop" in f[0] for frames in t.stacks for f in frames)
               for t in threads)
