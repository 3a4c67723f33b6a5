"""Where the loading code spent its time (record/loadprof.py samples it): per dataset, every
process and thread that loaded it together. Totals are exact (each loading call timed); the lines
are sampled, so a line's share is its sampled time over the sampled total."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple


@dataclass(frozen=True)
class LoadingLine:
    """One line of the user's loading code (library frames folded into it), or, where the call
    ran no code of the user's, the library function it entered (``site`` "")."""

    site: str  # "dataset.py:42" ("": a library function)
    function: str  # the user's function (qualified), or "module.function" of the library
    wall_s: float  # sampled time on it
    cpu_s: float  # the part of it its thread computed
    runq_s: float = 0.0  # the part it was ready to compute but waited for a CPU (other work on the cores);
    # the rest it waited on something else: I/O, sleep, a lock


@dataclass(frozen=True)
class LoadingProfile:
    dataset: str  # the dataset's class name, as the loader's record names it
    calls: int  # loading calls (a torch batch fetched, a PyDataset item, a py_function call)
    wall_s: float  # time inside them, every process and thread summed
    cpu_s: float  # the threads' CPU time inside them
    sampled_s: float  # the time the samples stand for (what line shares are of)
    interval_s: float  # the sampling period
    processes: int  # processes that loaded it
    in_main: bool  # the training process loaded it itself (0 workers, thread workers)
    sampler_cpu_s: float  # what sampling cost, CPU seconds in all its processes
    source: str = "sampled"  # "sampled" (record/loadprof.py), "tf.data" (the pipeline's own statistics: its
    # ops as lines, their time not split into CPU and waiting), "attached" (read from outside by py-spy:
    # shares of samples, no calls counted)
    lines: Tuple[LoadingLine, ...] = ()  # the innermost user line of each sample, costliest first
    # every user function on each sample's stack, counted once ("file.py:function", site ""):
    # a function's time with what it calls, as a profiler's cumulative time, costliest first
    functions: Tuple[LoadingLine, ...] = ()
