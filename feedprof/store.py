"""Inert records of what feedprof measured, and their versioned JSON form.

Everything that crosses a process or a file boundary is one of these frozen
dataclasses: the record layer produces them, analyse and render only read
them, and ``feedprof report`` rebuilds them from ``run.json`` /
``results.json`` alone. Nothing here calls back into hardware, and nothing
here is worded: findings are ``reasons.Reason`` records with their figures.

Conventions: times are seconds (``_s``) since the run's origin, memory is
bytes (``_bytes``), process CPU is psutil's percent of one core (100 = one
core busy, so a process tree can exceed 100), ``system_cpu_pct`` is percent
of all usable cores. ``None`` means "not measured", never zero.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, Optional, Tuple

from feedprof.codec import DecodeError, dumps, from_dict, write_text_atomic
from feedprof.codes import (Code, Framework, GpuStatus, InputBound, Phase, Role, RunKind, TrialState,  # noqa: F401
                            VerdictKind, WindowEnd)  # (the records' vocabulary)
from feedprof.reasons import Reason, Verdict
from feedprof.store_procs import Leftovers
from feedprof.store_samples import GpuSeries, Peaks, Samples  # noqa: F401 (re-exported: part of the run record)
from feedprof.upgrade import READS, upgrade

SCHEMA_RUN = "feedprof.run/3"
SCHEMA_TUNE = "feedprof.tune/3"


class StoreError(ValueError):
    """A file that is not a readable feedprof run or tune."""


# --------------------------------------------------------------------- host


@dataclass(frozen=True)
class GpuInfo:
    nvml_index: int
    cuda_index: Optional[int]  # None: NVML sees it but CUDA_VISIBLE_DEVICES hides it
    uuid: str
    name: str
    mem_total_bytes: Optional[int]


@dataclass(frozen=True)
class HostInfo:
    hostname: str = ""
    cpu_model: str = ""
    cpus_usable: int = 0  # affinity- and cgroup-aware
    cpus_online: int = 0
    ram_bytes: int = 0
    shm_total_bytes: Optional[int] = None
    python_version: str = ""
    platform: str = ""
    feedprof_version: str = ""
    frameworks: Dict[str, str] = field(default_factory=dict)
    gpus: Tuple[GpuInfo, ...] = ()
    gpu_status: GpuStatus = GpuStatus.UNKNOWN
    gpu_status_detail: str = ""  # NVML's own error text, where there is one


# -------------------------------------------------------------------- steps


@dataclass(frozen=True)
class StepLog:
    """Steady-state steps of one loader. A record may stand for several merged
    steps (``n_steps``); ``wall_s`` runs from the previous batch's delivery to
    this one's, ``wait_s`` is the part spent blocked in the loader."""

    t_end_s: Tuple[float, ...] = ()
    n_steps: Tuple[int, ...] = ()
    wait_s: Tuple[float, ...] = ()
    wall_s: Tuple[float, ...] = ()


@dataclass(frozen=True)
class EpochLog:
    """One record per epoch (merged like StepLog on very long runs).
    ``first_batch_s``: from asking for an iterator to its first batch;
    ``teardown_s``: ending the epoch on the loader's side (stopping workers);
    ``between_s``: from the loader's end of epoch to the next epoch's iterator
    (validation, checkpoints: what the loop does once per epoch outside the
    loader), summed over the ``n_between`` epochs where both were seen."""

    t_start_s: Tuple[float, ...] = ()
    n_epochs: Tuple[int, ...] = ()
    first_batch_s: Tuple[float, ...] = ()
    n_batches: Tuple[int, ...] = ()
    teardown_s: Tuple[float, ...] = ()
    between_s: Tuple[float, ...] = ()
    n_between: Tuple[int, ...] = ()


@dataclass(frozen=True)
class LoaderRecord:
    loader_id: int
    framework: Framework
    name: str = ""  # what the user called it in watch(), else the site
    site: str = ""  # innermost frame of user code that built it, "train.py:42"
    call_chain: Tuple[str, ...] = ()  # user frames, outermost first
    ordinal: int = 0  # loaders alive together at the same call chain, counted from 0
    instances: int = 1  # loader objects this record spans (a script may rebuild it every epoch)
    wait_observable: bool = True  # False: batches are pulled inside a framework's runtime (see frameworks/)
    config_sites: Tuple[str, ...] = ()  # where the knobs are set, if not at `site` (tf.data: map calls)
    settings_call: str = ""  # the call that holds the knobs when a library builds the loader ("TrainingArguments"):
    #                           config_sites is then the user frames of that call, outermost first
    dataset: str = ""
    batch_size: Optional[int] = None
    batches_per_epoch: Optional[int] = None
    config: Dict[str, Any] = field(default_factory=dict)  # knobs in effect
    script_config: Dict[str, Any] = field(default_factory=dict)  # knobs the script asked for
    injected: bool = False
    replayed: bool = False  # compute-ceiling trial: one cached batch replayed
    iterable: bool = False  # an IterableDataset: the dataset, not a sampler, decides what each worker yields
    batch_digests: Tuple[str, ...] = ()  # of the first epoch's first batches (iterable datasets; record/digest.py)
    worker_info_asked: Optional[bool] = None  # did its workers call get_worker_info() (None: not observable)
    batches: int = 0
    warmup_batches: int = 0
    warmup_s: float = 0.0
    steps: StepLog = field(default_factory=StepLog)
    epochs: EpochLog = field(default_factory=EpochLog)


@dataclass(frozen=True)
class Window:
    """The measured steady-state window of the training loader."""

    loader_id: Optional[int] = None
    t_start_s: Optional[float] = None
    t_end_s: Optional[float] = None
    end: WindowEnd = WindowEnd.NONE


@dataclass(frozen=True)
class RankInfo:
    """Which process of a multi-process job a run is (from its launcher's environment)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    launcher: str = ""  # torchrun | mpi | pmi | horovod | tf_config | slurm
    node: str = ""  # hostname
    node_rank: Optional[int] = None  # which node of the job, where the launcher says (torchrun's GROUP_RANK)
    pid: Optional[int] = None
    device: str = ""  # where its batches go ("cuda:0", "cpu")
    gpu_uuid: str = ""  # that device's NVML UUID (matched to the job's GPU curves)


@dataclass(frozen=True)
class OtherProcess:
    """A process outside the job that used the CPUs during the run."""

    pid: int
    name: str
    cpu_cores: float  # its mean CPU use over the run, in cores


@dataclass(frozen=True)
class Outcome:
    state: TrialState = TrialState.OK
    cause: Optional[Reason] = None  # why it did not end well (reasons.py)
    exit_code: Optional[int] = None
    traceback: str = ""  # the script's own, without feedprof's frames


# ------------------------------------------------------------------ summary


@dataclass(frozen=True)
class Summary:
    """What one run says about its training loader (analyse/diagnose.py)."""

    loader: str = ""
    framework: Framework = Framework.NONE
    batches_measured: int = 0
    measured_s: float = 0.0
    batches_per_s: Optional[float] = None  # median over chunks of the window
    batches_per_s_low: Optional[float] = None  # slowest chunk
    batches_per_s_high: Optional[float] = None  # fastest chunk
    n_chunks: int = 0
    effective_batches_per_s: Optional[float] = None  # per-epoch start-up amortised
    batch_size: Optional[int] = None
    samples_per_s: Optional[float] = None
    data_wait_fraction: Optional[float] = None
    data_wait_s: Optional[float] = None
    input_bound: InputBound = InputBound.UNKNOWN
    time_to_first_batch_s: Optional[float] = None
    epoch_startup_s: Optional[float] = None  # mean first-batch time of later epochs
    epoch_teardown_s: Optional[float] = None  # mean time ending an epoch on the loader's side
    num_workers: Optional[int] = None
    system_cpu_pct: Optional[float] = None
    main_cpu_pct: Optional[float] = None
    workers_cpu_pct: Optional[float] = None
    workers_runq_pct: Optional[float] = None  # the workers' wait for a CPU (percent of one core)
    other_cpu_cores: Optional[float] = None  # cores busy with processes outside the job
    gpu_util_pct: Tuple[Optional[float], ...] = ()  # per device, CUDA order
    peak_tree_rss_bytes: Optional[int] = None
    peak_tree_pss_bytes: Optional[int] = None
    peak_worker_pss_bytes: Optional[int] = None
    peak_worker_uss_bytes: Optional[int] = None
    peak_shm_used_bytes: Optional[int] = None
    peak_main_fds: Optional[int] = None
    peak_worker_fds: Optional[int] = None
    fd_limit: Optional[int] = None
    notes: Tuple[Reason, ...] = ()


# ---------------------------------------------------------------------- run


@dataclass(frozen=True)
class Run:
    schema: str = SCHEMA_RUN
    kind: RunKind = RunKind.PROFILE
    script: Optional[str] = None
    argv: Tuple[str, ...] = ()
    started_at: str = ""  # ISO 8601, local time with offset
    duration_s: float = 0.0
    host: HostInfo = field(default_factory=HostInfo)
    loaders: Tuple[LoaderRecord, ...] = ()
    window: Window = field(default_factory=Window)
    samples: Samples = field(default_factory=Samples)
    outcome: Outcome = field(default_factory=Outcome)
    cuda_used: Optional[bool] = None  # did the script initialise CUDA
    modules: Tuple[str, ...] = ()  # heavy frameworks the script imported (the fork server pre-imports them)
    other_processes: Tuple[OtherProcess, ...] = ()  # the busiest processes outside the job (record/others.py)
    rank: Optional[RankInfo] = None  # a rank of a multi-process job: which one
    ranks: Tuple["Run", ...] = ()  # a multi-process job: every rank's own run (this one is the whole job)
    summary: Optional[Summary] = None  # derived from the above, kept for readers of the JSON
    notes: Tuple[Reason, ...] = ()
    leftovers: Optional[Leftovers] = None  # None: not checked (a run inside the user's own process, older files)

    def loader(self, loader_id: Optional[int]) -> Optional[LoaderRecord]:
        return next((rec for rec in self.loaders if rec.loader_id == loader_id), None)


# --------------------------------------------------------------------- tune


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

    # The headline figures, derived from `run` (below): written to JSON just before
    # it for readers of results.json (codec.py), never read back.
    derived: ClassVar[Tuple[str, ...]] = (
        "batches_per_s", "batches_per_s_low", "batches_per_s_high", "effective_batches_per_s", "samples_per_s",
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
    config_text: str = ""  # the same in words, defaults left out
    trial_index: Optional[int] = None
    batches_per_s: Optional[float] = None
    samples_per_s: Optional[float] = None
    baseline_config: Dict[str, Any] = field(default_factory=dict)
    baseline_batches_per_s: Optional[float] = None
    speedup: Optional[float] = None  # over the baseline
    ceiling_batches_per_s: Optional[float] = None
    fraction_of_ceiling: Optional[float] = None
    input_bound_fraction: Optional[float] = None  # of the baseline: what the verdict is based on
    data_wait_fraction: Optional[float] = None  # of the baseline, measured directly (None: not observable)
    ceiling_gap_fraction: Optional[float] = None  # of the baseline: 1 - baseline / compute ceiling
    input_bound: InputBound = InputBound.UNKNOWN  # the TF Profiler's classes
    verdict: Reason = field(default_factory=Verdict)  # the headline's figures (render/words.py words it)
    reasons: Tuple[Reason, ...] = ()
    paste_line: str = ""  # what to paste (each statement with "# file:line") and run
    loader_site: str = ""


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
    trials: Tuple[Trial, ...] = ()
    notes: Tuple[Reason, ...] = ()
    launch: Tuple[str, ...] = ()  # the launch command of a multi-process job (feedprof tune -- LAUNCH...)


@dataclass(frozen=True)
class TuneStart:
    """What a tune is about to do, as its progress display shows it (never saved)."""

    script: str = ""  # absolute path
    launch: Tuple[str, ...] = ()  # a multi-process job's launch command (then it, not the script, is shown)
    budget_s: float = 0.0
    cpu_cap: int = 1  # CPUs the loader may use (per rank)
    host: HostInfo = field(default_factory=HostInfo)
    results_path: str = ""


# ------------------------------------------------------------------ files


def save(obj: Any, path: str) -> None:
    write_text_atomic(path, dumps(obj))


def load(path: str) -> Any:
    """Read a ``run.json`` (-> :class:`Run`) or ``results.json`` (-> :class:`TuneResult`)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise StoreError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise StoreError(f"{path}: is a directory, not a feedprof JSON file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StoreError(f"{path}: not JSON ({exc})") from None
    return from_json_data(data, source=path)


def from_json_data(data: Any, source: str = "input") -> Any:
    schema = data.get("schema") if isinstance(data, dict) else None
    if not isinstance(schema, str) or not schema.startswith("feedprof."):
        raise StoreError(f"{source}: not a feedprof file (no 'schema': '{SCHEMA_RUN}' or '{SCHEMA_TUNE}')")
    kind, _, version = schema.partition("/")
    cls = {"feedprof.run": Run, "feedprof.tune": TuneResult}.get(kind)
    if cls is None or version not in READS:
        raise StoreError(f"{source}: schema {schema!r} is not one this feedprof reads (run/1-3, tune/1-3)")
    try:
        return from_dict(cls, upgrade(data, version))
    except (DecodeError, TypeError, KeyError, IndexError, AttributeError, ValueError) as exc:
        raise StoreError(f"{source}: malformed {schema} file ({exc})") from None
