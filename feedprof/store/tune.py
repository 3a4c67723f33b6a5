"""The record of a tune (``results.json``): every trial, the recommendation,
and what the progress display is told as a tune starts."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, Optional, Tuple

from feedprof.store.reasons import Reason, Verdict
from feedprof.store.codes import Framework, InputBound, Phase, Role, TrialState
from feedprof.store.evidence import ConfigEvidence
from feedprof.store.batch_time import BatchTime
from feedprof.store.loading import LoadingProfile
from feedprof.store.host import HostInfo
from feedprof.store.online import OnlineRecord
from feedprof.store.run import Run
from feedprof.store.samples import Peaks

SCHEMA_TUNE = "feedprof.tune/1"  # the one version this feedprof writes and reads (the rule: store/schema.py)


@dataclass(frozen=True)
class Trial:
    """One trial of a tune: what it ran and how it ended; its figures are its run's."""

    index: int
    role: Role
    config: Dict[str, Any]
    state: TrialState
    cause: Optional[Reason] = None  # why it did not end well
    phase: Phase = Phase.SEARCH
    config_text: str = ""  # the config as keywords, leaving out the framework's defaults
    run: Optional[Run] = None  # the full record, curves included (None: it never ran)
    # What the loop does between epochs outside the loader (validation,
    # checkpoints), measured by a trial that crossed an epoch boundary and
    # charged per epoch to this one, which did not (None: nothing charged).
    epoch_gap_s: Optional[float] = None

    # The headline figures, derived from `run` (below): written to JSON just before
    # it for readers of results.json (codec.py), never read back.
    derived: ClassVar[Tuple[str, ...]] = (
        "batches_per_s", "batches_per_s_low", "batches_per_s_high", "effective_batches_per_s",
        "sustained_batches_per_s", "samples_per_s",
        "data_wait_fraction", "time_to_first_batch_s", "system_cpu_pct", "main_cpu_pct", "workers_cpu_pct",
        "workers_runq_pct", "other_cpu_cores", "gpu_util_pct", "peak_rss_bytes", "peak_pss_bytes",
        "peak_shm_used_bytes", "duration_s")
    derived_from: ClassVar[str] = "run"

    def _summary(self, name: str) -> Any:
        summary = self.run.summary if self.run is not None else None
        return getattr(summary, name) if summary is not None else None

    def _peaks(self) -> Peaks:
        return self.run.samples.peaks if self.run is not None else Peaks()

    @property
    def batches_per_s(self) -> Optional[float]:
        return self._summary("batches_per_s")

    @property
    def batches_per_s_low(self) -> Optional[float]:
        return self._summary("batches_per_s_low")

    @property
    def batches_per_s_high(self) -> Optional[float]:
        return self._summary("batches_per_s_high")

    @property
    def effective_batches_per_s(self) -> Optional[float]:
        return self._summary("effective_batches_per_s")

    @property
    def sustained_batches_per_s(self) -> Optional[float]:
        return self._summary("sustained_batches_per_s")

    @property
    def samples_per_s(self) -> Optional[float]:
        return self._summary("samples_per_s")

    @property
    def data_wait_fraction(self) -> Optional[float]:
        return self._summary("data_wait_fraction")

    @property
    def time_to_first_batch_s(self) -> Optional[float]:
        return self._summary("time_to_first_batch_s")

    @property
    def system_cpu_pct(self) -> Optional[float]:
        return self._summary("system_cpu_pct")

    @property
    def main_cpu_pct(self) -> Optional[float]:
        return self._summary("main_cpu_pct")

    @property
    def workers_cpu_pct(self) -> Optional[float]:
        return self._summary("workers_cpu_pct")

    @property
    def workers_runq_pct(self) -> Optional[float]:
        return self._summary("workers_runq_pct")

    @property
    def other_cpu_cores(self) -> Optional[float]:
        return self._summary("other_cpu_cores")

    @property
    def gpu_util_pct(self) -> Tuple[Optional[float], ...]:
        return self._summary("gpu_util_pct") or ()

    @property
    def peak_rss_bytes(self) -> Optional[int]:
        return self._peaks().tree_rss_bytes

    @property
    def peak_pss_bytes(self) -> Optional[int]:
        return self._peaks().tree_pss_bytes

    @property
    def peak_shm_used_bytes(self) -> Optional[int]:
        return self._peaks().shm_used_bytes

    @property
    def duration_s(self) -> float:
        return self.run.duration_s if self.run is not None else 0.0


@dataclass(frozen=True)
class Recommendation:
    framework: Framework
    config: Dict[str, Any]  # the framework's own keyword names
    # the thread-pool and core knobs beside them (store/knobs/threads.py: worker_threads, main_threads,
    # main_cores), which no keyword of the loader's sets: the paste sets them with code of its own
    threads: Dict[str, int] = field(default_factory=dict)
    config_text: str = ""  # the same in words, defaults left out
    trial_index: Optional[int] = None
    batches_per_s: Optional[float] = None  # over whole epochs: per-epoch costs (start-up, validation) included
    samples_per_s: Optional[float] = None
    baseline_config: Dict[str, Any] = field(default_factory=dict)
    baseline_batches_per_s: Optional[float] = None
    # The same two configs' rates while the loop trains (per-epoch costs left out): what a
    # stopwatch around the training steps inside an epoch sees
    training_batches_per_s: Optional[float] = None
    baseline_training_batches_per_s: Optional[float] = None
    speedup: Optional[float] = None  # over the baseline
    ceiling_batches_per_s: Optional[float] = None
    fraction_of_ceiling: Optional[float] = None
    input_bound_fraction: Optional[float] = None  # of the baseline: what the verdict is based on
    data_wait_fraction: Optional[float] = None  # of the baseline, measured directly (None: not observable)
    ceiling_gap_fraction: Optional[float] = None  # of the baseline: 1 - baseline / compute ceiling
    input_bound: InputBound = InputBound.UNKNOWN  # the TF Profiler's classes
    verdict: Reason = field(default_factory=Verdict)  # the headline's figures (render/words/ words it)
    reasons: Tuple[Reason, ...] = ()
    paste_line: str = ""  # what to paste (each statement with "# file:line") and run
    loader_site: str = ""
    # Beyond the knobs: where a batch's time goes for the script's own settings, the pick and the
    # compute ceiling (analyse/batch_time.py), and where the pick's loading code spent its time
    batch_time: Tuple[BatchTime, ...] = ()
    loading: Optional[LoadingProfile] = None
    # The config is predicted from the script's own settings' windows, not measured: an online
    # loader held where a switch would move the script's random draws (its rates are left out)
    predicted: bool = False


@dataclass(frozen=True)
class TuneResult:
    schema: str = SCHEMA_TUNE
    script: str = ""
    argv: Tuple[str, ...] = ()
    framework: Framework = Framework.NONE
    loader_site: str = ""
    started_at: str = ""
    duration_s: float = 0.0
    budget_s: float = 0.0
    complete: bool = False  # False: interrupted or the budget cut the search short
    stop_reason: Optional[Reason] = None
    host: HostInfo = field(default_factory=HostInfo)
    recommendation: Optional[Recommendation] = None
    trials: Tuple[Trial, ...] = ()  # offline: each isolated trial (online: none; its windows are in ``online``)
    evidence: Tuple[ConfigEvidence, ...] = ()  # each config measured, in one shape for both searches
    notes: Tuple[Reason, ...] = ()
    launch: Tuple[str, ...] = ()  # the launch command of a multi-process job (feedprof tune -- LAUNCH...)
    online: Optional[OnlineRecord] = None  # tune --online: the real run's windows, switches and failures
    run: Optional[Run] = None  # tune --online: the real run itself, curves included


@dataclass(frozen=True)
class TuneStart:
    """What a tune is about to do, as its progress display shows it (never saved)."""

    script: str = ""  # absolute path
    launch: Tuple[str, ...] = ()  # a multi-process job's launch command (then it, not the script, is shown)
    budget_s: float = 0.0
    cpu_cap: int = 1  # CPUs the loader may use (per rank)
    host: HostInfo = field(default_factory=HostInfo)
    results_path: str = ""
