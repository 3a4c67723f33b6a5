"""``with feedprof.profile() as prof:`` — profiling inside the user's own loop.

NOTE [ Context-manager data flow ]

    profile() ─ start ─► Sampler thread (this process + its loader workers)
    prof.watch(loader) ─► Watched ─ __iter__ ─► WatchedIterator ─ __next__ ─► StepRecorder
    stop / summary() ─► store.Run (inert) ─► analyse.diagnose.summarize ─► Summary

``feedprof.profile(enabled=False)`` returns a :class:`NullProfile` with the
same methods, whose ``watch`` hands the iterable back untouched: the training
loop keeps one shape whether profiling is on or off.
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Iterable, List, Optional, TextIO, TypeVar

from feedprof.analyse.diagnose import summarize, training_loader
from feedprof.record.clock import MONOTONIC, Clock, now_iso
from feedprof.record.cuda import cuda_in_use
from feedprof import defaults
from feedprof.record.sampler import Sampler
from feedprof.record.steps import Binding, LoaderInfo, StepRecorder, Watched
from feedprof.store import GpuStatus, Run, RunKind, Samples, Summary, Window, WindowEnd, save

if TYPE_CHECKING:
    from feedprof.store import TuneResult
    from feedprof.tune.inprocess import InProcessTuner

T = TypeVar("T")


class Profile:
    def __init__(self, interval_s: float = defaults.INTERVAL_S, gpu: bool = True,
                 warmup_batches: int = defaults.PROFILE_WINDOW.warmup_batches, clock: Clock = MONOTONIC,
                 sample: bool = True, tune: bool = False, explore_s: float = defaults.EXPLORE_S,
                 max_workers: Optional[int] = None):
        self.interval_s = interval_s
        self.gpu = gpu
        self.warmup_batches = warmup_batches
        self.clock = clock
        self.sample = sample
        self._recorders: List[StepRecorder] = []
        self._sampler: Optional[Sampler] = None
        self._samples: Optional[Samples] = None
        self._origin_s: Optional[float] = None
        self._started_at = ""
        self._stopped_at: Optional[float] = None
        self._host = None
        self.tune = tune  # tune the watched DataLoaders' settings inside this loop (tune/inprocess.py)
        self._online_opts = (explore_s, max_workers)
        self._tuner: Optional["InProcessTuner"] = None

    # -- lifecycle --------------------------------------------------------

    def __enter__(self) -> "Profile":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> "Profile":
        from feedprof.record.gpu import NullGpu, open_gpu, torch_cuda_uuids
        from feedprof.record.host import host_info

        if self._origin_s is not None:
            raise RuntimeError("this profile was already started; make a new feedprof.profile()")
        self._origin_s = self.clock.now_s()
        self._started_at = now_iso(self.clock)
        gpu = open_gpu(cuda_uuids=torch_cuda_uuids()) if self.gpu else NullGpu(GpuStatus.OFF)
        self._host = host_info(gpu)
        if self.tune:
            from feedprof.tune.inprocess import InProcessTuner
            from feedprof.tune.online import OnlineOptions

            explore_s, max_workers = self._online_opts
            self._tuner = InProcessTuner(self.clock, self._origin_s,
                                         OnlineOptions(explore_s=explore_s, max_workers=max_workers, gpu=self.gpu))
        if self.sample:
            self._sampler = Sampler(pid=os.getpid(), interval_s=self.interval_s, gpu=gpu,
                                    clock=self.clock, origin_s=self._origin_s).start()
        else:
            gpu.close()
        return self

    def stop(self) -> None:
        if self._tuner is not None:
            self._tuner.close()
        if self._sampler is not None and self._samples is None:
            self._samples = self._sampler.stop()
        if self._stopped_at is None and self._origin_s is not None:
            self._stopped_at = self.clock.now_s()

    # -- the loop ---------------------------------------------------------

    def watch(self, iterable: Iterable, name: str = "", batch_size: Optional[int] = None) -> Watched:
        """Wrap a loader (any iterable of batches): every batch it yields is timed."""
        if self._origin_s is None:
            self.start()
        from feedprof.frameworks import code_site
        from feedprof.frameworks.watched import describe_loader

        framework, info = describe_loader(iterable)
        if batch_size is not None:
            info.batch_size = batch_size
        rec = self.recorder(framework, name=name, info=info)
        rec.binding = Binding(site=code_site(sys._getframe(1)))
        if self._tuner is not None and framework == "torch":
            iterable = self._tuner.wrap(iterable, rec.loader_id) or iterable
        return Watched(iterable, rec, now=self.clock.now_s, cpu=self.clock.thread_cpu_s)

    def recorder(self, framework: str, name: str = "", info: Optional[LoaderInfo] = None) -> StepRecorder:
        """A step recorder fed by the caller (a framework callback) rather than
        by ``watch``."""
        if self._origin_s is None:
            self.start()
        rec = StepRecorder(loader_id=len(self._recorders), framework=framework, name=name,
                           warmup_batches=self.warmup_batches, origin_s=self._origin_s, info=info)
        self._recorders.append(rec)
        return rec

    # -- results ----------------------------------------------------------

    @property
    def run(self) -> Run:
        if self._origin_s is None:
            raise RuntimeError("the profile has not started yet")
        samples = self._samples
        if samples is None:
            samples = self._sampler.snapshot() if self._sampler is not None else Samples()
        loaders = tuple(r.snapshot() for r in self._recorders)
        end = self._stopped_at if self._stopped_at is not None else self.clock.now_s()
        run = Run(kind=RunKind.CONTEXT, script=sys.argv[0] if sys.argv and sys.argv[0] else None,
                  argv=tuple(sys.argv[1:]), started_at=self._started_at,
                  duration_s=end - self._origin_s, host=self._host, loaders=loaders,
                  samples=samples, cuda_used=cuda_in_use())
        train = training_loader(run)
        if train is not None:
            rec = next(r for r in self._recorders if r.loader_id == train.loader_id)
            start = None if rec.t_steady_start is None else rec.t_steady_start - self._origin_s
            last = None if rec.t_last is None else rec.t_last - self._origin_s
            run = _replace(run, window=Window(loader_id=train.loader_id, t_start_s=start,
                                              t_end_s=last, end=WindowEnd.FULL_RUN))
        return _replace(run, summary=summarize(run))

    def tuned(self) -> "TuneResult":
        """profile(tune=True): the online search's result (a TuneResult, as tune --online writes)."""
        if self._tuner is None:
            raise RuntimeError("this profile does not tune: use feedprof.profile(tune=True)")
        return self._tuner.result(self.run)

    def summary(self) -> Summary:
        """What the run says about its training loader; ``print()`` it for words."""
        return PrintableSummary.of(self.run.summary)

    def print(self, file: Optional[TextIO] = None) -> None:
        print(self.summary(), file=file or sys.stdout)

    def save(self, path: str = "run.json") -> str:
        """Write ``run.json`` (schema ``feedprof.run/1``, store.SCHEMA_RUN); ``feedprof.load`` reads it back."""
        save(self.run, path)
        return path

    def report(self, path: str = "feedprof.html") -> str:
        """The HTML page: the run's, or with ``tune=True`` the online tune's (its timeline and pick)."""
        from feedprof.render.report import write_report

        return write_report(self.tuned() if self._tuner is not None else self.run, path)

    def to_tensorboard(self, logdir: str) -> str:
        """Write the run as TensorBoard event files in ``logdir`` (needs ``pip install tensorboard``)."""
        from feedprof.render.tensorboard import write_run

        write_run(self.run, logdir)
        return logdir

    def _repr_html_(self) -> Optional[str]:  # Jupyter: the profile as its report (render/fragments.py)
        if self._origin_s is None:
            return None
        from feedprof.render.fragments import run_html

        return run_html(self.run)


class NullProfile:
    """Profiling turned off: the same interface, doing nothing, costing nothing."""

    def __enter__(self) -> "NullProfile":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def start(self) -> "NullProfile":
        return self

    def stop(self) -> None:
        pass

    def watch(self, iterable: Iterable, name: str = "", batch_size: Optional[int] = None) -> Iterable:
        return iterable

    def summary(self) -> Summary:
        return PrintableSummary()

    def print(self, file: Optional[TextIO] = None) -> None:
        pass

    def save(self, path: str = "run.json") -> Optional[str]:
        return None

    def report(self, path: str = "feedprof.html") -> Optional[str]:
        return None

    def to_tensorboard(self, logdir: str) -> Optional[str]:
        return None


class PrintableSummary(Summary):
    """The Summary record that ``prof.summary()`` returns: the same fields, and
    ``print()`` words it (the record itself stays free of words)."""

    @classmethod
    def of(cls, summary: Optional[Summary]) -> "PrintableSummary":
        import dataclasses

        if summary is None:
            return cls()
        return cls(**{f.name: getattr(summary, f.name) for f in dataclasses.fields(Summary)})

    def __str__(self) -> str:
        from feedprof.render.text import format_summary

        return format_summary(self)

    def _repr_html_(self) -> str:  # Jupyter: the verdict as the profile shows it (render/fragments.py)
        from feedprof.render.fragments import summary_html

        return summary_html(self)


def profile(enabled: bool = True, **kwargs: Any):
    """Profile a training loop: ``with feedprof.profile() as prof: for b in prof.watch(loader): ...``"""
    return Profile(**kwargs) if enabled else NullProfile()


def _replace(obj: T, **changes: Any) -> T:
    import dataclasses

    return dataclasses.replace(obj, **changes)
