"""Findings about how a tune went, and the recommendation's reasons."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional, Tuple

from feedprof.store.reasons.base import Config, Reason
from feedprof.store.codes import InputBound, VerdictKind


# ------------------------------------------------------- how a tune went


@dataclass(frozen=True)
class LadderStoppedByTrial(Reason):
    """A rung's trial did not end well: no more workers were tried."""

    code: ClassVar[str] = "ladder_stopped_by_trial"
    knob: str = ""
    n: int = 0
    state: str = ""


@dataclass(frozen=True)
class ReachedCeiling(Reason):
    code: ClassVar[str] = "reached_ceiling"
    knob: str = ""
    n: int = 0


@dataclass(frozen=True)
class FlatRung(Reason):
    """A rung gained less than ``min_gain``; ``forgiven``: one more was tried."""

    code: ClassVar[str] = "flat_rung"
    knob: str = ""
    n: int = 0
    min_gain: float = 0.0
    forgiven: bool = False


@dataclass(frozen=True)
class CpusSaturated(Reason):
    """The ladder stopped at the CPU count: the workers filled the CPUs."""

    code: ClassVar[str] = "cpus_saturated"
    cpu_cap: int = 0


@dataclass(frozen=True)
class MeasuredAgain(Reason):
    """A trial measured again, in a longer window, before it decided anything:
    its window spread (``why="spread"``) or it read well below a rung beneath
    it (``why="dip"``)."""

    code: ClassVar[str] = "measured_again"
    config: Config = field(default_factory=dict)
    why: str = ""
    spread: float = 0.0
    ceiling: bool = False


@dataclass(frozen=True)
class PastCpuCount(Reason):
    """The workers left CPU idle, so more workers than CPUs were tried."""

    code: ClassVar[str] = "past_cpu_count"
    cpu_cap: int = 0


@dataclass(frozen=True)
class JumpedAhead(Reason):
    code: ClassVar[str] = "jumped_ahead"
    knob: str = ""
    n: int = 0


@dataclass(frozen=True)
class MaxWorkersReached(Reason):
    code: ClassVar[str] = "max_workers_reached"
    max_workers: int = 0


@dataclass(frozen=True)
class RivalsRemeasured(Reason):
    """The pick and its closest rival were within noise: both measured again
    (``busy``: on a busy machine, in longer windows and up to one more round)."""

    code: ClassVar[str] = "rivals_remeasured"
    pick: Config = field(default_factory=dict)
    rival: Config = field(default_factory=dict)
    margin: float = 0.0
    repeats: int = 0
    busy: bool = False


@dataclass(frozen=True)
class BusyMachine(Reason):
    """Other processes took ``other_cores`` of the CPUs on average while trials
    ran (``busiest``: their names, busiest first): figures are noisier, and
    workers starved by them are not what limits the job."""

    code: ClassVar[str] = "busy_machine"
    other_cores: float = 0.0
    cpus: int = 0
    busiest: Tuple[str, ...] = ()


@dataclass(frozen=True)
class ForkServerFailed(Reason):
    code: ClassVar[str] = "fork_server_failed"
    error: str = ""


@dataclass(frozen=True)
class CeilingFailed(Reason):
    code: ClassVar[str] = "ceiling_failed"
    state: str = ""
    cause: Optional[Reason] = None


@dataclass(frozen=True)
class CeilingBelowLoading(Reason):
    """The compute-ceiling trial replayed one batch slower than a config that really loaded
    (``loading_batches_per_s``, at ``loading_config``): a measurement that failed, not a bound.
    Its step ran slower than beside real loading (``main_cpu_pct``: the training process's CPU
    in it). The search went by the loop's data wait instead."""

    code: ClassVar[str] = "ceiling_below_loading"
    ceiling_batches_per_s: float = 0.0
    loading_batches_per_s: float = 0.0
    loading_config: Config = field(default_factory=dict)
    main_cpu_pct: Optional[float] = None


@dataclass(frozen=True)
class LoopBarelyWaits(Reason):
    """No compute ceiling to stop at: the ladder stopped where the loop waited for data less
    than ``below`` of its time (more loader work cannot help a loop that does not wait)."""

    code: ClassVar[str] = "loop_barely_waits"
    knob: str = ""
    n: int = 0
    wait_fraction: float = 0.0
    below: float = 0.0


@dataclass(frozen=True)
class BudgetCutShort(Reason):
    code: ClassVar[str] = "budget_cut_short"
    budget_s: float = 0.0
    next_config: Optional[Config] = None  # None: the compute ceiling was next
    again: bool = False  # the next was a config measured already, to confirm it or its figure
    climbing: bool = False  # the next was a rung of the worker ladder, which goes on while its rungs gain
    needed_s: Optional[float] = None  # climbing: the --budget with room for its next rung, a refinement and a confirmation


@dataclass(frozen=True)
class TuneInterruptedEarly(Reason):
    code: ClassVar[str] = "tune_interrupted"


@dataclass(frozen=True)
class BaselineNotMeasured(Reason):
    code: ClassVar[str] = "baseline_not_measured"
    state: str = ""
    cause: Optional[Reason] = None


@dataclass(frozen=True)
class NoLoaderAtSite(Reason):
    code: ClassVar[str] = "no_loader_at_site"
    site: str = ""
    seen: tuple = ()


# ---------------------------------------------------- the recommendation


@dataclass(frozen=True)
class Verdict(Reason):
    """The headline: which kind of news (codes.VerdictKind), and its figures."""

    code: ClassVar[str] = "verdict"
    kind: VerdictKind = VerdictKind.NONE
    input_bound: InputBound = InputBound.UNKNOWN
    input_bound_fraction: Optional[float] = None
    config: Config = field(default_factory=dict)
    speedup: Optional[float] = None
    fraction_of_ceiling: Optional[float] = None
    workers_before: Optional[int] = None
    workers_after: Optional[int] = None
    dataset: str = ""  # kind duplicates: the IterableDataset that repeats its records per worker
    baseline_state: str = ""  # kind survives: how the script's own settings ended (killed, failed)
    baseline_config: Config = field(default_factory=dict)


@dataclass(frozen=True)
class BaselineFigures(Reason):
    code: ClassVar[str] = "baseline_figures"
    config: Config = field(default_factory=dict)
    batches_per_s: float = 0.0
    data_wait_fraction: Optional[float] = None
    ceiling_batches_per_s: Optional[float] = None


@dataclass(frozen=True)
class KeepScriptSettings(Reason):
    code: ClassVar[str] = "keep_script_settings"


@dataclass(frozen=True)
class NothingTried(Reason):
    """The tune stopped before any loader setting was tried: only the script's
    own settings (and the compute ceiling) ran. What they took, what one trial
    of a setting takes, and the budget that would try the worker ladder's first
    rungs (tune/tuner.py estimates it from the measured trials)."""

    code: ClassVar[str] = "nothing_tried"
    budget_s: float = 0.0
    spent_s: float = 0.0  # the tune's time so far: the script's own settings, the ceiling, starting up
    ceiling: bool = False  # the compute ceiling was measured
    trial_s: Optional[float] = None  # what one trial of a setting takes (None: nothing measured to tell)
    rungs: int = 0  # the ladder's first rungs that needed_s has room for
    needed_s: Optional[float] = None  # a --budget with room for them
    budget_ran_out: bool = False  # False: interrupted, or the tune is still going


@dataclass(frozen=True)
class PickFigures(Reason):
    code: ClassVar[str] = "pick_figures"
    config: Config = field(default_factory=dict)
    batches_per_s: float = 0.0
    speedup: Optional[float] = None
    fraction_of_ceiling: Optional[float] = None
    confirm_windows: int = 0  # windows measured after the pick was chosen, that the figure comes from
    chosen_at_batches_per_s: Optional[float] = None  # what it was chosen on (biased up: the best of several)
    spread: Optional[float] = None  # how sure: half the relative range of its windows (0.05 = ±5 %)
    training_batches_per_s: Optional[float] = None  # its rate while the loop trains (per-epoch costs left out)


@dataclass(frozen=True)
class CpusAreTheLimit(Reason):
    code: ClassVar[str] = "cpus_are_the_limit"
    cores_per_worker: Optional[float] = None
    cpu_cap: Optional[int] = None
    workers_cores: Optional[float] = None  # who used the CPUs: the workers,
    main_cores: Optional[float] = None  # the training process (its step, collation),
    other_cores: Optional[float] = None  # and everything else on the machine


@dataclass(frozen=True)
class WorkersLeaveCpuIdle(Reason):
    code: ClassVar[str] = "workers_leave_cpu_idle"
    cores_per_worker: Optional[float] = None
    workers_cores: Optional[float] = None
    main_cores: Optional[float] = None
    other_cores: Optional[float] = None


@dataclass(frozen=True)
class NotTheLoader(Reason):
    code: ClassVar[str] = "not_the_loader"


@dataclass(frozen=True)
class FewerWorkersDoAsWell(Reason):
    code: ClassVar[str] = "fewer_workers_do_as_well"
    workers_before: int = 0
    workers_after: int = 0
    memory_saved_bytes: Optional[int] = None


@dataclass(frozen=True)
class ShortOfCeiling(Reason):
    code: ClassVar[str] = "short_of_ceiling"
    fraction_short: float = 0.0


@dataclass(frozen=True)
class LeadNotConfirmed(Reason):
    """``rival`` was chosen at ``chosen_at_batches_per_s``, but measured again beside the script's
    own settings it ran only ``speedup`` times as fast (its windows ``spread``), and costs no less:
    the script's own settings are kept."""

    code: ClassVar[str] = "lead_not_confirmed"
    rival: Config = field(default_factory=dict)
    chosen_at_batches_per_s: float = 0.0
    speedup: float = 0.0
    spread: Optional[float] = None


@dataclass(frozen=True)
class CheaperWithinNoise(Reason):
    """``rival`` measured ``rival_lead`` faster, but inside this run's noise: a lead must pass
    ``noise`` (noise.margin, from repeats of one config) to be told apart, and this one does not:
    the cheaper ``config`` is recommended."""

    code: ClassVar[str] = "cheaper_within_noise"
    config: Config = field(default_factory=dict)
    rival: Config = field(default_factory=dict)
    rival_lead: float = 0.0
    noise: float = 0.0
    repeats: int = 0


@dataclass(frozen=True)
class MeasuredRepeatedly(Reason):
    code: ClassVar[str] = "measured_repeatedly"
    times: int = 0


@dataclass(frozen=True)
class PersistentWorkersComputed(Reason):
    """persistent_workers judged from the measured start-up, not trialled; or (``in_run``) what an online
    run did: its workers served the later epochs without the restart (frameworks/torch_carry.py)."""

    code: ClassVar[str] = "persistent_workers_computed"
    startup_s: float = 0.0
    gain: float = 0.0
    epoch_s: float = 0.0
    in_run: bool = False


@dataclass(frozen=True)
class VersusAutotune(Reason):
    """The static pick against tf.data's AUTOTUNE; ``switched``: AUTOTUNE won."""

    code: ClassVar[str] = "versus_autotune"
    static_batches_per_s: float = 0.0
    autotune_batches_per_s: float = 0.0
    static_rss_bytes: Optional[int] = None
    autotune_rss_bytes: Optional[int] = None
    switched: bool = False


@dataclass(frozen=True)
class AppliesToEveryRank(Reason):
    """A multi-process job's knobs are per rank: every rank builds its own loader."""

    code: ClassVar[str] = "applies_to_every_rank"
    local_ranks: int = 1
    world_size: int = 1
    workers_per_rank: Optional[int] = None
    cpus: int = 0
    cpu_cap: int = 0


@dataclass(frozen=True)
class RayCpusReserved(Reason):
    """A Ray Train job: the CPUs Ray reserves for each training worker (ScalingConfig's
    resources_per_worker) against what each used with the pick, its loader workers included."""

    code: ClassVar[str] = "ray_cpus_reserved"
    reserved_cpus: int = 0  # per training worker
    used_cores: Optional[float] = None  # the busiest training worker's process and loader workers
    workers_per_rank: Optional[int] = None
    local_ranks: int = 1  # training workers on this machine
    world_size: int = 1
    machine_cpus: int = 0
    reserve_cpus: Optional[int] = None  # what to reserve per worker (None: the reservation holds)
    capped: bool = False  # CPU-bound loading: the search stopped at the reservation
    site: str = ""  # the ScalingConfig(...) call ("train_ray.py:64"), where the script has one


# ------------------------------------------------- where the setting lives


@dataclass(frozen=True)
class SetByFlag(Reason):
    """``knob`` comes from the script's own command-line flag: run with
    ``flag value`` (``value`` "" for a switch that takes none)."""

    code: ClassVar[str] = "set_by_flag"
    knob: str = ""
    flag: str = ""
    value: str = ""
    declared_at: str = ""  # the add_argument call, "train.py:12"
    default: Optional[str] = None  # the flag's default, as written in the script
    used_at: str = ""  # the call the flag's value reaches, "train.py:31"
    also_used_at: Tuple[str, ...] = ()  # other lines that read it (another loader it sets too)


@dataclass(frozen=True)
class SetElsewhere(Reason):
    """``knob`` is set at ``site`` (``call``'s ``keyword``), not where the loader is built."""

    code: ClassVar[str] = "set_elsewhere"
    knob: str = ""
    keyword: str = ""
    call: str = ""  # "TrainingArguments", "make_loader", "WORKERS = ..."
    site: str = ""
    loader_site: str = ""


@dataclass(frozen=True)
class SettingSourceUnknown(Reason):
    """feedprof could not follow ``expression`` (at ``site``) to where ``knob``
    is set; ``expression`` "": the call itself was not found there. ``left_out``:
    the paste does not set it (``expression`` is a ``**`` splat feedprof cannot
    read, which may pass it already: adding it could pass it twice); set it to
    ``value`` (as Python writes it) where ``expression`` is made."""

    code: ClassVar[str] = "setting_source_unknown"
    knob: str = ""
    expression: str = ""
    site: str = ""
    call: str = ""
    left_out: bool = False
    value: str = ""


# ------------------------------------------------ trainers and torchdata


@dataclass(frozen=True)
class TrainerAdviceChecked(Reason):
    """A trainer's own advice on workers (Lightning's warning, from the CPU
    count alone) against what the tune measured."""

    code: ClassVar[str] = "trainer_advice_checked"
    trainer: str = ""
    suggested: int = 0
    script_workers: int = 0
    picked_workers: int = 0
    agrees: bool = False  # the loader is the bottleneck and more workers pay off
    input_bound: InputBound = InputBound.UNKNOWN
    data_wait_fraction: Optional[float] = None
    speedup: Optional[float] = None
    fraction_of_ceiling: Optional[float] = None
    suggested_batches_per_s: Optional[float] = None  # measured with that many workers, if it was
    picked_batches_per_s: Optional[float] = None


@dataclass(frozen=True)
class ThreadsVersusProcesses(Reason):
    """The same worker count measured with threads and with processes
    (torchdata.nodes ParallelMapper ``method``). Memory is the peak RSS of the
    process tree, read at every sample (PSS is read too rarely to catch many
    short-lived workers); RSS counts pages a worker process shares with the
    main process once per process, so the difference is an upper bound."""

    code: ClassVar[str] = "threads_versus_processes"
    workers: int = 0
    thread_batches_per_s: float = 0.0
    process_batches_per_s: float = 0.0
    thread_rss_bytes: Optional[int] = None
    process_rss_bytes: Optional[int] = None
    threads_do_as_well: bool = False


# ---------------------------------------------------- what more workers break


@dataclass(frozen=True)
class WorkersCapped(Reason):
    """No more than ``max_workers`` are recommended or tried: ``config`` ended
    ``state`` because of ``because`` (duplicated data, a kill, a hazard)."""

    code: ClassVar[str] = "workers_capped"
    max_workers: int = 0
    config: Config = field(default_factory=dict)
    state: str = ""
    because: Optional[Reason] = None


@dataclass(frozen=True)
class MemoryGrowthProjected(Reason):
    """Workers' memory grows (copy-on-read): one worker's USS now and projected to
    the end of an epoch, and the whole job's at ``workers``; ``full_copy_bytes``
    is the most one worker can copy (the main process's memory)."""

    code: ClassVar[str] = "memory_growth_projected"
    workers: int = 0
    growth_bytes_per_s: float = 0.0
    worker_now_bytes: Optional[int] = None
    worker_epoch_end_bytes: Optional[int] = None
    total_epoch_end_bytes: Optional[int] = None
    epoch_s: Optional[float] = None
    full_copy_bytes: Optional[int] = None
    budget_bytes: Optional[int] = None
    persistent: bool = False
