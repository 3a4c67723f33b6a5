"""Findings about the machine, one run's loader, and how a trial ended."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional, Tuple

from feedprof.store.reasons.base import Config, Reason
from feedprof.store.codes import Framework


# ------------------------------------------------------------ the machine


@dataclass(frozen=True)
class GpuUnavailable(Reason):
    code: ClassVar[str] = "gpu_unavailable"
    status: str = ""  # a record.gpu.GpuStatus value
    detail: str = ""


@dataclass(frozen=True)
class GpuIntervalBelowNvml(Reason):
    """Sampling faster than NVML averages adds nothing."""

    code: ClassVar[str] = "gpu_interval_below_nvml"
    interval_s: float = 0.0
    floor_s: float = 0.0


@dataclass(frozen=True)
class SamplingStopped(Reason):
    code: ClassVar[str] = "sampling_stopped"
    what: str = ""  # host | gpu
    error: str = ""


# ------------------------------------------------------- one run's loader


@dataclass(frozen=True)
class NoLoaderIterated(Reason):
    code: ClassVar[str] = "no_loader_iterated"


@dataclass(frozen=True)
class WaitNotObservable(Reason):
    code: ClassVar[str] = "wait_not_observable"
    framework: Framework = Framework.NONE


@dataclass(frozen=True)
class OnlyWarmup(Reason):
    code: ClassVar[str] = "only_warmup"
    batches: int = 0


@dataclass(frozen=True)
class FewSteadyBatches(Reason):
    code: ClassVar[str] = "few_steady_batches"
    batches: int = 0


@dataclass(frozen=True)
class WindowNotReached(Reason):
    """The script ended before the steady-state window was measured."""

    code: ClassVar[str] = "window_not_reached"
    steady_batches: int = 0
    window_batches: int = 0


@dataclass(frozen=True)
class NotInstrumented(Reason):
    code: ClassVar[str] = "not_instrumented"
    adapter: str = ""
    error: str = ""


@dataclass(frozen=True)
class RayClusterJoined(Reason):
    """The script's ray.init() joined a Ray cluster that was already running: its training
    workers are that cluster's processes, out of reach of the run feedprof started."""

    code: ClassVar[str] = "ray_cluster_joined"
    address: str = ""  # as given (address=, RAY_ADDRESS), or "auto" where Ray found the cluster itself


@dataclass(frozen=True)
class TrainerSuggestedWorkers(Reason):
    """The trainer warned that the training loader has few workers and suggested
    ``suggested`` (Lightning: from the CPU count alone, nothing measured)."""

    code: ClassVar[str] = "trainer_suggested_workers"
    trainer: str = ""
    loader: str = ""  # the trainer's name for it, "train_dataloader"
    num_workers: int = 0
    suggested: int = 0


@dataclass(frozen=True)
class NoSuperInit(Reason):
    """A PyDataset subclass that skips super().__init__(**kwargs): Keras ignores its knobs."""

    code: ClassVar[str] = "no_super_init"
    dataset: str = ""


@dataclass(frozen=True)
class EpochEndStall(Reason):
    """tf_keras waits ~5 s at every epoch end with workers > 1 or use_multiprocessing."""

    code: ClassVar[str] = "tf_keras_epoch_end_stall"


@dataclass(frozen=True)
class PinMemoryNoEffect(Reason):
    code: ClassVar[str] = "pin_memory_no_effect"


# -------------------------------------------------- how a trial ended badly


@dataclass(frozen=True)
class TrialTimedOut(Reason):
    code: ClassVar[str] = "trial_timed_out"
    limit_s: float = 0.0


@dataclass(frozen=True)
class NoBatchWithin(Reason):
    code: ClassVar[str] = "no_batch_within"
    limit_s: float = 0.0


@dataclass(frozen=True)
class QueuedForResources(Reason):
    """The job's Slurm step waited for resources before its tasks started: no time of the
    trial's, and no evidence about the config."""

    code: ClassVar[str] = "queued_for_resources"
    job: str = ""  # the Slurm job id that waited
    waited_s: float = 0.0


@dataclass(frozen=True)
class QueueWaitTooLong(Reason):
    """The step was still waiting for resources when the run had to end (its queue limit)."""

    code: ClassVar[str] = "queue_wait_too_long"
    job: str = ""
    waited_s: float = 0.0
    limit_s: float = 0.0


@dataclass(frozen=True)
class SharedMemoryExhausted(Reason):
    """A worker died of SIGBUS, or /dev/shm filled: Docker's 64 MB default.
    The figures are what the trial measured (None: not measured);
    ``need_bytes``: /dev/shm the config's batches in flight need, learned from
    the trials that ran (tune/budget.py)."""

    code: ClassVar[str] = "shm_exhausted"
    signal: str = ""
    workers: Optional[int] = None
    shm_total_bytes: Optional[int] = None
    shm_peak_bytes: Optional[int] = None
    need_bytes: Optional[int] = None


@dataclass(frozen=True)
class OutOfMemoryKilled(Reason):
    """SIGKILL, most likely the kernel's OOM killer; with what the trial measured."""

    code: ClassVar[str] = "oom_killed"
    signal: str = ""
    workers: Optional[int] = None
    worker_pss_bytes: Optional[int] = None  # the largest worker's
    tree_pss_bytes: Optional[int] = None  # the whole job's peak
    ram_bytes: Optional[int] = None  # what the job may use: the machine's RAM, or its container's limit


@dataclass(frozen=True)
class TooManyOpenFiles(Reason):
    """"Too many open files" (EMFILE): a process reached RLIMIT_NOFILE."""

    code: ClassVar[str] = "too_many_open_files"
    error: str = ""
    workers: Optional[int] = None
    limit_fds: Optional[int] = None  # the soft RLIMIT_NOFILE of the script
    main_fds: Optional[int] = None  # peak open files of the main process
    worker_fds: Optional[int] = None  # of the busiest worker


@dataclass(frozen=True)
class CudaInForkedWorker(Reason):
    """A loader worker, forked, touched CUDA: "Cannot re-initialize CUDA in forked subprocess"."""

    code: ClassVar[str] = "cuda_in_forked_worker"
    error: str = ""


@dataclass(frozen=True)
class KilledBySignal(Reason):
    code: ClassVar[str] = "killed_by_signal"
    signal: str = ""


@dataclass(frozen=True)
class ExitedWithCode(Reason):
    code: ClassVar[str] = "exited_with_code"
    exit_code: Optional[int] = None
    last_line: str = ""


@dataclass(frozen=True)
class ScriptFailed(Reason):
    """The script raised or exited non-zero; ``hint`` names a known trap."""

    code: ClassVar[str] = "script_failed"
    error: str = ""
    hint: str = ""  # fit_workers_moved | ""


@dataclass(frozen=True)
class ScriptExited(Reason):
    code: ClassVar[str] = "script_exited"
    exit_code: Optional[int] = None


@dataclass(frozen=True)
class Interrupted(Reason):
    code: ClassVar[str] = "interrupted"


@dataclass(frozen=True)
class OverMemoryBudget(Reason):
    code: ClassVar[str] = "over_memory_budget"
    need_bytes: int = 0
    per_worker_bytes: Optional[int] = None
    free_bytes: int = 0


@dataclass(frozen=True)
class OverShmBudget(Reason):
    code: ClassVar[str] = "over_shm_budget"
    need_bytes: int = 0
    free_bytes: int = 0


@dataclass(frozen=True)
class RankFailed(Reason):
    """One rank of a multi-process job did not end well (its own traceback is the trial's)."""

    code: ClassVar[str] = "rank_failed"
    rank: int = 0
    cause: Optional[Reason] = None


@dataclass(frozen=True)
class RanksLostConnection(Reason):
    """A trial of ``config`` failed as a connection between the ranks was reset (gloo, NCCL, a
    store): the infrastructure's, not the config's; measured once more, its first attempt set
    aside in ``trial_dir``."""

    code: ClassVar[str] = "ranks_lost_connection"
    config: Config = field(default_factory=dict)
    rank: int = 0
    error: str = ""
    trial_dir: str = ""


@dataclass(frozen=True)
class RankSpread(Reason):
    """A job of several ranks, window by window: the median rank's data wait against the worst
    rank's, and whether the worst is always the same rank (a slow node or disk holds the others
    back: synchronous training runs at its pace) or changes from window to window (noise)."""

    code: ClassVar[str] = "rank_spread"
    windows: int = 0
    ranks: int = 0
    median_wait_fraction: float = 0.0  # over the windows, of each window's median rank
    worst_wait_fraction: float = 0.0  # over the windows, of each window's worst rank
    worst_rank: int = 0  # the rank that was the worst most often
    worst_node: str = ""
    worst_share: float = 0.0  # the share of windows in which it was the worst
    holds_back: bool = False  # always the same rank, by a clear margin


@dataclass(frozen=True)
class NodesDiffer(Reason):
    """One job's ranks on nodes that differ in the CPUs a rank may use (one feedprof for every node):
    the one setting every rank runs fits the node whose ranks have the fewest. And the rank that
    sets the job's pace: the one that waited longest for data (training is synchronous: the others
    wait for it)."""

    code: ClassVar[str] = "nodes_differ"
    nodes: Tuple[str, ...] = ()
    rank_cpus: Tuple[int, ...] = ()  # per node: the CPUs each of its ranks may use (the fewest of its ranks'; 0: not said)
    node_cpus: Tuple[int, ...] = ()  # per node: the CPUs usable there (0: not known)
    pace_rank: int = 0
    pace_node: str = ""
    pace_wait_fraction: Optional[float] = None
    others_wait_fraction: Optional[float] = None  # the median of the other ranks'


@dataclass(frozen=True)
class Straggler(Reason):
    """One rank waits for data much longer than the others: it sets the job's pace,
    and the others wait for it inside the all-reduce (communication, not data wait)."""

    code: ClassVar[str] = "straggler"
    rank: int = 0
    wait_fraction: float = 0.0
    others_wait_fraction: float = 0.0


@dataclass(frozen=True)
class GrowthOverMemoryBudget(Reason):
    """Workers' memory grows (copy-on-read): projected to the end of an epoch,
    the config would not fit. ``per_worker_bytes``: one worker then."""

    code: ClassVar[str] = "growth_over_memory_budget"
    need_bytes: int = 0
    per_worker_bytes: int = 0
    growth_per_batch_bytes: float = 0.0
    epoch_batches: int = 0
    free_bytes: int = 0


@dataclass(frozen=True)
class OverFdLimit(Reason):
    """Predicted to open more files than RLIMIT_NOFILE allows one process."""

    code: ClassVar[str] = "over_fd_limit"
    need_fds: int = 0
    limit_fds: int = 0
    process: str = ""  # main | worker


# ------------------------------------------------ what more workers break


@dataclass(frozen=True)
class DuplicatedPerWorker(Reason):
    """An IterableDataset that ignores get_worker_info(): every worker yields the
    whole stream, so each record arrives once per worker. Evidence: of the
    epoch's first ``batches_checked`` batches only ``distinct_batches`` differ,
    and/or an epoch held ``epoch_batches`` batches or more (it may not have
    ended) against ``single_epoch_batches`` with at most one worker."""

    code: ClassVar[str] = "duplicated_per_worker"
    dataset: str = ""
    workers: int = 0
    batches_checked: int = 0
    distinct_batches: int = 0
    part: int = 0  # 0: whole batches; k: their k-th part (an array, a list of names) repeated
    epoch_batches: Optional[int] = None
    single_epoch_batches: Optional[int] = None
    worker_info_asked: Optional[bool] = None  # did its workers call get_worker_info() (None: not observable)


@dataclass(frozen=True)
class WorkerInfoNeverAsked(Reason):
    """An IterableDataset whose workers never called get_worker_info(), though
    their batches differed (random data, or sharded some other way)."""

    code: ClassVar[str] = "worker_info_never_asked"
    dataset: str = ""
    workers: int = 0


@dataclass(frozen=True)
class MemoryGrows(Reason):
    """One worker's private memory (USS) grew steadily over the window:
    copy-on-read of Python objects, most likely."""

    code: ClassVar[str] = "memory_grows"
    workers: int = 0
    growth_bytes_per_s: float = 0.0
    growth_per_batch_bytes: Optional[float] = None  # per batch that worker made
    window_s: float = 0.0
    uss_start_bytes: int = 0
    uss_end_bytes: int = 0


@dataclass(frozen=True)
class OpenFilesNearLimit(Reason):
    """A process of the job held ``fds`` open files, near its RLIMIT_NOFILE."""

    code: ClassVar[str] = "open_files_near_limit"
    fds: int = 0
    limit_fds: int = 0
    process: str = ""  # main | worker
    workers: int = 0
