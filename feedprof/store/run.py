"""The record of one run (``run.json``): its loaders' steps and epochs, the
measured window, how it ended, which rank it was, and the summary analyse/
derived from them.

Conventions (every record in this package): times are seconds (``_s``)
since the run's origin, memory is bytes (``_bytes``), process CPU is
psutil's percent of one core (100 = one core busy, so a process tree can
exceed 100), ``system_cpu_pct`` is percent of all usable cores. ``None``
means "not measured", never zero.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from feedprof.store.reasons import Reason
from feedprof.store.codes import Framework, InputBound, RunKind, TrialState, WindowEnd
from feedprof.store.host import HostInfo
from feedprof.store.procs import Leftovers
from feedprof.store.attached import AttachedInfo
from feedprof.store.loading import LoadingProfile
from feedprof.store.pools import ProcessPools
from feedprof.store.samples import Samples

SCHEMA_RUN = "feedprof.run/1"  # the one version this feedprof writes and reads (the rule: store/schema.py)


@dataclass(frozen=True)
class StepLog:
    """Steady-state steps of one loader. A record may stand for several merged
    steps (``n_steps``); ``wall_s`` runs from the previous batch's delivery to
    this one's, ``wait_s`` is the part spent in the loader's ``__next__``, and
    ``cpu_s`` the training thread's CPU time in it: its own loading work (receiving
    a batch from the workers; at 0 workers all of the loading), so that ``wait_s``
    less ``cpu_s`` is time blocked. ``cpu_s`` is empty where it was not measured."""

    t_end_s: Tuple[float, ...] = ()
    n_steps: Tuple[int, ...] = ()
    wait_s: Tuple[float, ...] = ()
    wall_s: Tuple[float, ...] = ()
    cpu_s: Tuple[float, ...] = ()


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
class AutotunedKnob:
    """One setting of one op of a running tf.data pipeline, as the pipeline's own autotuning model
    held it: what AUTOTUNE chose where the op left it to AUTOTUNE (``autotuned``), else the
    script's fixed value."""

    position: int  # the op's place in the pipeline, counted from its source (0)
    op: str  # as TensorFlow names it after its rewrites: ParallelMapV2, MapAndBatch, ParallelBatch, Prefetch, ...
    knob: str  # parallelism | buffer_size | cycle_length
    value: float
    max_value: Optional[float] = None  # the most AUTOTUNE may choose there (parallelism: its CPU budget)
    autotuned: bool = False


@dataclass(frozen=True)
class OpTime:
    """One op of a running tf.data pipeline, as tf.data's own statistics count it (its autotuning
    model, for the iterator running then): the elements it produced, and the time it spent producing
    them, its inputs' time left out (summed over its parallel calls: it can exceed the wall time)."""

    position: int  # counted from the pipeline's source (0)
    op: str
    elements: int
    processing_s: float


@dataclass(frozen=True)
class AutotuneReading:
    """A tf.data pipeline's settings at ``t_s`` (seconds from the run's start), read from its iterator;
    the last reading of a run also holds its ops' time (``ops``)."""

    t_s: float
    knobs: Tuple[AutotunedKnob, ...] = ()
    ops: Tuple[OpTime, ...] = ()


@dataclass(frozen=True)
class LoaderRecord:
    loader_id: int
    framework: Framework
    name: str = ""  # what the user called it in watch(), else the site
    site: str = ""  # innermost frame of user code that built it, "train.py:42"
    call_chain: Tuple[str, ...] = ()  # user frames, outermost first
    built_in: Tuple[str, ...] = ()  # a library helper's frames from the chain's last to the construction,
    #                                 outermost first, absolute "path:line" (record/userframes.py)
    ordinal: int = 0  # loaders alive together at the same call chain, counted from 0
    instances: int = 1  # loader objects this record spans (a script may rebuild it every epoch)
    wait_observable: bool = True  # False: batches are pulled inside a framework's runtime (see frameworks/)
    config_sites: Tuple[str, ...] = ()  # where the knobs are set, if not at `site` (tf.data: map calls)
    settings_call: str = ""  # the call that holds the knobs when a library builds the loader ("TrainingArguments"):
    #                           config_sites is then the user frames of that call, outermost first
    dataset: str = ""
    batch_size: Optional[int] = None
    batches_per_epoch: Optional[int] = None
    in_flight: int = 0  # batches its config makes ahead, beside the step (0: it loads between steps)
    config: Dict[str, Any] = field(default_factory=dict)  # knobs in effect
    script_config: Dict[str, Any] = field(default_factory=dict)  # knobs the script asked for
    injected: bool = False
    replayed: bool = False  # compute-ceiling trial: one cached batch replayed
    iterable: bool = False  # an IterableDataset: the dataset, not a sampler, decides what each worker yields
    shuffle_rng: str = ""  # a shuffling loader's random source: "global" (torch's global RNG, no generator=),
    #                         "loader" (its generator=), "sampler" (the sampler's own); "": no shuffle, or not known
    own_rng: Tuple[str, ...] = ()  # the random generators its dataset, collate_fn or worker_init_fn hold, by kind
    #                                ("numpy.random.Generator"): persistent workers carry them on across epochs
    batch_digests: Tuple[str, ...] = ()  # of the first epoch's first batches (iterable datasets; record/digest.py)
    worker_info_asked: Optional[bool] = None  # did its workers call get_worker_info() (None: not observable)
    autotune: Tuple[AutotuneReading, ...] = ()  # tf.data: its settings over the run, each time they changed
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
    job: str = ""  # the scheduler's job, where there is one (Slurm: "JOBID.STEPID")
    cpus: Optional[int] = None  # CPUs this rank may use for its loader: its share of what the task may use
    pid: Optional[int] = None
    device: str = ""  # where its batches go ("cuda:0", "cpu")
    gpu_uuid: str = ""  # that device's NVML UUID (matched to the job's GPU curves)
    self_sampled: bool = False  # its CPU, memory and device curves were taken by the rank itself, on its own node:
    #                             the feedprof that launched the job could not see it (trial/rank_meter.py)


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
    # the window's batches over its wall time (no median over chunks), per-epoch
    # costs charged as above: what a stopwatch around whole epochs sees (the
    # epoch rate); batches_per_s is the rate while the loop trains
    sustained_batches_per_s: Optional[float] = None
    batches_per_epoch: Optional[int] = None
    per_epoch_cost_s: Optional[float] = None  # start-up, teardown and the time between epochs, per epoch
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
    main_runq_pct: Optional[float] = None  # the training process's wait for a CPU (percent of one core)
    main_threads_runnable: Optional[float] = None  # threads of the training process ready to run, on average
    workers_threads_runnable: Optional[float] = None  # threads of the workers ready to run, together, on average
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
    leftovers: Optional[Leftovers] = None  # None: not checked (a run inside the user's own process)
    loading: Tuple[LoadingProfile, ...] = ()  # where each dataset's loading code spent its time
    attached: Optional[AttachedInfo] = None  # feedprof attach: read from outside, sampled (store/attached.py)
    pools: Tuple[ProcessPools, ...] = ()  # the thread pools of the training process and of its loader's workers

    def loader(self, loader_id: Optional[int]) -> Optional[LoaderRecord]:
        return next((rec for rec in self.loaders if rec.loader_id == loader_id), None)
