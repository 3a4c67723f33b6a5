"""Every finding in words: the one place where store/reasons/ records become
sentences, for the terminal and the HTML page alike. The package mirrors
store/reasons/: this module words the tune's and the run's findings and merges
the tables of ``advice`` (where the advice applies, what it changes beyond
speed), ``hazards`` (what more workers break), ``origin`` (where a setting
comes from); ``autotune`` words what tf.data's AUTOTUNE chose over a run.

``say(reason)`` words any finding; ``headline(verdict)`` the recommendation's
first line; ``gpu_status(status, detail)`` why there is no GPU data.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from feedprof.analyse.diagnose import AT_CEILING
from feedprof.store import reasons as r
from feedprof.render import online_checks
from feedprof.render.words import advice, attach, beyond, hazards, origin, threads
from feedprof.store import GpuStatus, InputBound, Role, Trial, VerdictKind, knobs
from feedprof.units import fmt_bytes, fmt_pct, fmt_rate, fmt_seconds

LOOKED_FOR = ("a torch.utils.data.DataLoader, keras.utils.PyDataset, tf_keras Sequence or generator, "
              "or tf.data.Dataset being iterated")
FIT_MOVED_HINT = ("Keras 3 moved workers, use_multiprocessing and max_queue_size from fit() to the "
                  "PyDataset: pass them to its constructor and have it call super().__init__(**kwargs)")
HINTS = {"fit_workers_moved": FIT_MOVED_HINT}
SLOWED_BY_WORKERS = 1.05  # fewer workers this much faster: the workers slowed the job (not just added nothing)

_GPU = {
    GpuStatus.OK: "ok",
    GpuStatus.OFF: "sampling turned off",
    GpuStatus.NO_PYNVML: "not available — nvidia-ml-py is not installed (pip install nvidia-ml-py)",
    GpuStatus.NO_LIBRARY: "not available — NVML library not found (no NVIDIA driver on this machine)",
    GpuStatus.NO_DRIVER: "not available — NVIDIA driver not loaded",
    GpuStatus.NVML_ERROR: "not available — NVML error",
    GpuStatus.NO_GPU: "not available — no NVIDIA GPU found",
    GpuStatus.ALL_HIDDEN: "not available — CUDA_VISIBLE_DEVICES hides every GPU",
    GpuStatus.UNKNOWN: "not sampled",
}


def gpu_status(status: Any, detail: str = "") -> str:
    """Why there is (no) GPU data, e.g. "not available — no NVIDIA GPU found"."""
    try:
        words = _GPU[GpuStatus(status)]
    except ValueError:
        words = str(status)
    return f"{words}: {detail}" if detail and status not in (GpuStatus.OK, GpuStatus.OFF) else words


CEILING_TEXT = "one cached batch replayed"
OWN_SETTINGS_TEXT = "the script's own settings"


def config_words(config: Dict[str, Any], framework: str = "") -> str:
    """A loader config as its framework's keywords ("num_workers=8, persistent_workers=True", as a
    space describes it: store/knobs), or the script's own settings where it is empty."""
    return knobs.describe(framework, config) if config else OWN_SETTINGS_TEXT


def config_cell(t: Trial) -> str:
    """A trial's config as the tables show it."""
    if t.role == Role.CEILING:
        return CEILING_TEXT
    return t.config_text or config_words(t.config)


def _describer(framework: str) -> Callable[[Dict[str, Any]], str]:
    return lambda config: config_words(config, framework)


# ----------------------------------------------------------------- verdict


HEADLINE_CLASS = {InputBound.HIGHLY: "Highly input-bound", InputBound.MODERATELY: "Moderately input-bound",
                  InputBound.NOT: "Not input-bound", InputBound.UNKNOWN: "Input-bound: unknown"}


def headline(verdict: r.Reason, framework: str = "") -> str:
    """The recommendation's first line."""
    if not isinstance(verdict, r.Verdict):
        return say(verdict, framework)
    v, describe = verdict, _describer(framework)
    cls = HEADLINE_CLASS.get(v.input_bound, v.input_bound)
    if v.kind == VerdictKind.DUPLICATES:
        return (f"{v.dataset or 'The IterableDataset'} repeats every record once per worker: {describe(v.config)} "
                "until its __iter__ shards by worker (more workers duplicate the data, they are not faster)")
    if v.kind == VerdictKind.SURVIVES:
        near = f" ({fmt_pct(v.fraction_of_ceiling)} of the compute ceiling)" if v.fraction_of_ceiling else ""
        fate = "failed" if v.baseline_state == "failed" else f"were {v.baseline_state}"
        return (f"The script's own settings ({describe(v.baseline_config)}) {fate}: "
                f"{describe(v.config)} is the best config that ran{near}")
    if v.kind == VerdictKind.FEWER_WORKERS:
        freed = (v.workers_before or 0) - (v.workers_after or 0)
        fast = f"{v.speedup:.2f}× as fast" if v.speedup and v.speedup >= 1.005 else "as fast"
        processes = f"{freed} process{'es' if freed != 1 else ''}"
        if v.speedup is not None and v.speedup >= SLOWED_BY_WORKERS:  # they cost the job more than they gave
            return (f"Too many workers: the {v.workers_before} workers slow the job down; {describe(v.config)} "
                    f"is {fast} and frees {processes}")
        near = v.fraction_of_ceiling is not None and v.fraction_of_ceiling >= AT_CEILING
        lead = "Not the loader" if near or v.input_bound == InputBound.NOT else f"{cls}, but not for want of workers"
        return (f"{lead}: the {v.workers_before} workers add nothing; {describe(v.config)} is {fast} "
                f"and frees {processes}")
    if v.kind == VerdictKind.CHEAPER:
        return f"Not the loader's settings: {describe(v.config)} is as fast as the script's own, for less"
    if v.kind == VerdictKind.NOT_LOADER:
        return "Not input-bound: the loader is not what limits this job"
    if v.kind == VerdictKind.NO_BETTER:
        return f"{cls}, but no loader setting tried does better than the script's own"
    if v.kind == VerdictKind.NOTHING_TRIED:
        return f"{cls}, but no loader setting was tried: nothing is known yet to do better than the script's own"
    if v.kind == VerdictKind.PREDICTED:
        return (f"{cls}: {describe(v.config)}, predicted by the wait of the script's own settings to reach the "
                "compute ceiling (not measured: the run kept its own settings, as said below)")
    faster = f"{v.speedup:.1f}× faster" if v.speedup else "the fastest found"
    near = f" ({fmt_pct(v.fraction_of_ceiling)} of the compute ceiling)" if v.fraction_of_ceiling else ""
    return f"{cls}: {describe(v.config)} is {faster}{near}"


# --------------------------------------------------------------- findings


def _baseline(x: r.BaselineFigures, describe: Callable) -> str:
    waits = f"waits for data {fmt_pct(x.data_wait_fraction)} of the time and " \
        if x.data_wait_fraction is not None else ""
    ceiling = ""
    if x.ceiling_batches_per_s:
        ceiling = (f", {fmt_pct(x.batches_per_s / x.ceiling_batches_per_s)} of the compute ceiling "
                   f"({fmt_rate(x.ceiling_batches_per_s)})")
    return (f"With the script's own settings ({describe(x.config)}) the loop {waits}runs at "
            f"{fmt_rate(x.batches_per_s)}{ceiling}.")


def _pick(x: r.PickFigures, describe: Callable) -> str:
    faster = f": {x.speedup:.2f}× the baseline" if x.speedup else ""
    near = f", {fmt_pct(x.fraction_of_ceiling)} of the ceiling" if x.fraction_of_ceiling else ""
    return (f"{describe(x.config)} runs at {fmt_rate(x.batches_per_s)} over whole epochs{faster}{near}"
            f"{_how_sure(x)}{_while_training(x)}.")


def _while_training(x: r.PickFigures) -> str:
    """Its rate while the loop trains, where per-epoch costs (start-up, validation) make it differ."""
    t = x.training_batches_per_s
    if t is None or not x.batches_per_s or abs(t / x.batches_per_s - 1) < 0.02:
        return ""
    return (f"; {fmt_rate(t)} while the loop trains (the rest is each epoch's start-up and what the loop does "
            "between epochs)")


def _how_sure(x: r.PickFigures) -> str:
    """Where the pick's figure comes from, and how far its windows spread."""
    spread = f", ±{100 * x.spread:.0f} %" if x.spread is not None else ""
    if not x.confirm_windows:
        return f" (from the windows it was chosen on{spread})"
    chosen = f"; it was chosen at {fmt_rate(x.chosen_at_batches_per_s)}" if x.chosen_at_batches_per_s else ""
    return f" (measured again after it was chosen, {x.confirm_windows} window(s){spread}{chosen})"


def _cpu_limit(x: r.CpusAreTheLimit, describe: Callable) -> str:
    each = f" ({x.cores_per_worker:.2f} cores each)" if x.cores_per_worker else ""
    cap = f", and {x.cpu_cap} CPU(s) are usable" if x.cpu_cap else ""
    return (f"The CPUs are the limit for the workers{each}{cap}: past that, more workers only compete; to go "
            f"faster, make per-sample work (decoding, augmentation) cheaper.{_who_used_cpus(x)}")


def _idle(x: r.WorkersLeaveCpuIdle, describe: Callable) -> str:
    each = f" ({x.cores_per_worker:.2f} cores each)" if x.cores_per_worker else ""
    return (f"The workers leave CPU time idle{each}: they wait on I/O or on handing batches over, so more "
            f"workers than CPUs can pay off.{_who_used_cpus(x)}")


def _who_used_cpus(x: Any) -> str:
    """Which processes used the CPUs: the workers' own use decides, not the machine's total."""
    parts = [f"{name} {cores:.2f}" for name, cores in (("the workers", x.workers_cores),
                                                         ("the training process", x.main_cores),
                                                         ("other processes", x.other_cores)) if cores is not None]
    return f" Cores used: {', '.join(parts)}." if parts else ""


def _again(x: r.MeasuredAgain, describe: Callable) -> str:
    what = "the compute ceiling" if x.ceiling else describe(x.config) or "the script's own settings"
    why = f"its window spread ±{100 * x.spread:.0f} %" if x.why == "spread" else \
        "it read well below fewer workers, against the curve"
    return f"{what} was measured again in a longer window before it decided anything: {why}"


def _fewer(x: r.FewerWorkersDoAsWell, describe: Callable) -> str:
    saved = f" and free about {fmt_bytes(x.memory_saved_bytes)} of memory" if x.memory_saved_bytes else ""
    return f"{x.workers_after} worker(s) do as well as {x.workers_before}{saved}."


def _versus_autotune(x: r.VersusAutotune, describe: Callable) -> str:
    if x.switched:
        return (f"AUTOTUNE ({fmt_rate(x.autotune_batches_per_s)}, peak RSS {fmt_bytes(x.autotune_rss_bytes)}) "
                f"was faster than the best static setting ({fmt_rate(x.static_batches_per_s)}, peak RSS "
                f"{fmt_bytes(x.static_rss_bytes)})")
    ratio = x.static_batches_per_s / x.autotune_batches_per_s if x.autotune_batches_per_s else float("nan")
    return (f"against AUTOTUNE: {fmt_rate(x.static_batches_per_s)} vs {fmt_rate(x.autotune_batches_per_s)} "
            f"({ratio:.2f}×), peak RSS {fmt_bytes(x.static_rss_bytes)} vs {fmt_bytes(x.autotune_rss_bytes)}")


def _by_flag(x: r.SetByFlag, describe: Callable) -> str:
    run = f"{x.flag} {x.value}" if x.value else x.flag
    default = f", default {x.default}" if x.default is not None else ""
    also = f"; it is read at {', '.join(x.also_used_at)} too, which the flag changes as well" \
        if x.also_used_at else ""
    return (f"{x.knob} comes from the script's own flag {x.flag} (declared at {x.declared_at}{default}; "
            f"used at {x.used_at}): run with `{run}`{also}.")


def _unknown_source(x: r.SettingSourceUnknown, describe: Callable) -> str:
    if not x.expression:
        return (f"feedprof could not find the {x.call}(...) call at {x.site} (the loader is built inside a "
                f"library): set these keywords where its settings are made.")
    if x.left_out:
        made = x.expression.lstrip("*")
        return (f"feedprof cannot tell whether {x.call}(...) at {x.site} already gets {x.knob} through "
                f"{x.expression}, so it is left out of the advice (Python refuses a keyword passed twice): set "
                f"{x.knob}={x.value} where {made} is made.")
    return (f"feedprof cannot tell where {x.knob} gets its value ({x.expression} at {x.site}): the line below "
            f"sets it in the statement it names; change it where {x.expression} is set instead, if you prefer.")


def _advice(x: r.TrainerAdviceChecked, describe: Callable) -> str:
    said = (f"{x.trainer.capitalize()} warned that the training loader has few workers and suggested "
            f"num_workers={x.suggested} (from the CPU count alone)")
    measured = ""
    if x.suggested_batches_per_s is not None and x.suggested != x.picked_workers:
        measured = f"; its num_workers={x.suggested} measured {fmt_rate(x.suggested_batches_per_s)}"
    if x.agrees:
        gain = f", {x.speedup:.1f}× the script's num_workers={x.script_workers}" if x.speedup else ""
        return (f"{said}. feedprof's measurements agree that the loader is the bottleneck (the loop waits "
                f"{fmt_pct(x.data_wait_fraction)} of the time): num_workers={x.picked_workers} runs at "
                f"{fmt_rate(x.picked_batches_per_s)}{gain}{measured}.")
    near = f", {fmt_pct(x.fraction_of_ceiling)} of the compute ceiling" if x.fraction_of_ceiling else ""
    return (f"{said}. feedprof's measurements do not bear it out: the loop waits for data "
            f"{fmt_pct(x.data_wait_fraction)} of the time and num_workers={x.picked_workers} runs at "
            f"{fmt_rate(x.picked_batches_per_s)}{near}{measured}, so more workers would cost memory for nothing "
            f"(the warning can be silenced with warnings.filterwarnings).")


def _threads(x: r.ThreadsVersusProcesses, describe: Callable) -> str:
    rates = f"{fmt_rate(x.thread_batches_per_s)} vs {fmt_rate(x.process_batches_per_s)}"
    known = x.thread_rss_bytes is not None and x.process_rss_bytes is not None
    diff = x.process_rss_bytes - x.thread_rss_bytes if known else None  # type: ignore[operator]
    mem = ""
    if diff is not None and diff > 0:
        mem = (f"; the processes' tree peaked at {fmt_bytes(x.process_rss_bytes)} RSS against "
               f"{fmt_bytes(x.thread_rss_bytes)} with threads, about {fmt_bytes(diff / max(1, x.workers))} per "
               "worker process (RSS counts pages shared with the main process in each worker: an upper bound)")
    if x.threads_do_as_well:
        return (f"With {x.workers} workers, threads do at least as well as processes ({rates}), without a "
                f"process each{mem}: method=\"thread\" is the cheaper choice for loading that waits rather than "
                "computes.")
    ratio = x.process_batches_per_s / x.thread_batches_per_s if x.thread_batches_per_s else float("nan")
    return (f"With {x.workers} workers, processes are {ratio:.2f}× as fast as threads ({rates}): the map "
            f"function holds the GIL{mem}.")


def _nodes_differ(x: r.NodesDiffer, d: str) -> str:
    each = "; ".join(f"{node}: {f'{n} CPUs, ' if n else ''}{c or '?'} per rank"
                     for node, n, c in zip(x.nodes, x.node_cpus, x.rank_cpus))
    said = [c for c in x.rank_cpus if c]
    fewest = x.nodes[x.rank_cpus.index(min(said))] if said else ""
    out = f"the job's nodes differ ({each})"
    if fewest:
        out += (f": every rank runs the same line, so the settings fit {fewest}, whose ranks may use the fewest CPUs "
                "(the search's CPU budget is theirs)")
    if x.pace_wait_fraction is not None:
        out += (f"; rank {x.pace_rank} (node {x.pace_node}) sets the job's pace: it waited for data "
                f"{fmt_pct(x.pace_wait_fraction)} of the time"
                + (f", the other ranks {fmt_pct(x.others_wait_fraction)}" if x.others_wait_fraction is not None
                   else ""))
    return out


def _rank_spread(x: r.RankSpread, d: str) -> str:
    where = f"rank {x.worst_rank}" + (f" (node {x.worst_node})" if x.worst_node else "")
    head = (f"over {x.windows} windows of {x.ranks} ranks, the median rank waited for data "
            f"{fmt_pct(x.median_wait_fraction)} of the time and the worst {fmt_pct(x.worst_wait_fraction)}; ")
    if x.holds_back:
        return head + (f"the worst was {where} in {fmt_pct(x.worst_share)} of the windows: its loading holds the "
                       "other ranks back (training is synchronous), so look at what is slower about that rank's data "
                       "or node (its disk, its CPUs, what else runs there)")
    if x.worst_share >= 0.75:
        return head + f"the worst was {where} in {fmt_pct(x.worst_share)} of the windows, by a small margin"
    return head + (f"the worst rank changed from window to window ({where} in {fmt_pct(x.worst_share)} of them): "
                   "noise, not a slow node")


def _flat(x: r.FlatRung, describe: Callable) -> str:
    if x.forgiven:
        return (f"{x.knob}={x.n} gained less than {fmt_pct(x.min_gain)}, but the loop still waited and the "
                "CPUs had room: one more rung was tried")
    return f"{x.knob}={x.n} gained less than {fmt_pct(x.min_gain)} over fewer workers: more workers stopped paying off"


def _budget(x: r.BudgetCutShort, describe: Callable) -> str:
    what = "the ceiling" if x.next_config is None else describe(x.next_config)
    if x.again:
        return (f"the {x.budget_s:.0f} s budget ran out before {what} was measured again (its figures come "
                "from fewer windows; a longer --budget confirms them)")
    if x.climbing:
        more = f": --budget {x.needed_s:.0f} gives it the next rung, a refinement and a confirmation (at the " \
               "trials' pace so far)" if x.needed_s else ": a longer --budget lets it go on"
        return (f"the {x.budget_s:.0f} s budget cut the search short while more workers still paid off, before "
                f"{what}{more}")
    return f"the {x.budget_s:.0f} s budget cut the search short before {what} (a longer --budget may find more)"


def _nothing_tried(x: r.NothingTried, describe: Callable) -> str:
    ran = "the script's own settings and the compute ceiling" if x.ceiling else "the script's own settings"
    if x.budget_ran_out:
        lead = f"The {x.budget_s:.0f} s budget ran out before any loader setting was tried: {ran} took"
    else:
        lead = f"The tune stopped before any loader setting was tried: {ran} took"
    each = f", and a trial of one setting takes about {fmt_seconds(x.trial_s)}" if x.trial_s else ""
    give = ""
    if x.needed_s:
        give = (f" Give --budget {x.needed_s:.0f} to try at least the worker ladder's first {x.rungs} rungs "
                "(--resume keeps what was measured).")
    return f"{lead} {fmt_seconds(x.spent_s)}{each}.{give}"


def _ray_cpus(x: r.RayCpusReserved, describe: Callable) -> str:
    workers = f", so the machine runs {x.local_ranks} × {x.workers_per_rank} = {x.local_ranks * x.workers_per_rank} " \
              "loader workers" if x.workers_per_rank else ""
    head = (f"The settings are per training worker: each of the {x.local_ranks} Ray worker(s) on this machine (of "
            f"{x.world_size} in all) builds its own loader with this line{workers}. Ray reserves {x.reserved_cpus} "
            f"CPU(s) for each (ScalingConfig(resources_per_worker)), the search's CPU budget per worker")
    used = f"; each used up to {x.used_cores:.2f} cores, its loader workers included" if x.used_cores is not None \
        else ""
    at = f" at {x.site}" if x.site else ""
    if x.reserve_cpus is None:
        return f"{head}{used}: the reservation holds."
    if x.capped:
        return (f"{head}{used}. Loading is CPU-bound and the search stopped at that reservation: more loader workers "
                f"need more CPUs reserved per Ray worker. This machine has {x.machine_cpus} CPU(s) for "
                f"{x.local_ranks} worker(s): reserve {x.reserve_cpus} each (ScalingConfig{at}, the line below), "
                "then tune again to measure more loader workers.")
    return (f"{head}{used}: more than Ray reserved, so Ray may place other work on CPUs these loaders use. Reserve "
            f"{x.reserve_cpus} CPU(s) per worker (ScalingConfig{at}, the line below).")


def _script_failed(x: r.ScriptFailed, describe: Callable) -> str:
    hint = HINTS.get(x.hint, "")
    return f"{x.error} ({hint})" if hint else x.error


_WORDS: Dict[type, Callable[[Any, Callable], str]] = {
    r.Unknown: lambda x, d: "(a finding this version of feedprof cannot word)",
    r.GpuUnavailable: lambda x, d: "GPU: " + gpu_status(x.status, x.detail),
    r.GpuIntervalBelowNvml: lambda x, d: (f"GPU: sampled every {x.interval_s:g} s, but NVML averages over up to "
                                          f"1 s; intervals under {x.floor_s:g} s add no information"),
    r.SamplingStopped: lambda x, d: f"{'GPU' if x.what == 'gpu' else 'host'} sampling stopped: {x.error}",
    r.NoLoaderIterated: lambda x, d: (
        "no data loader was iterated: feedprof times and tunes a PyTorch DataLoader, a Keras PyDataset or "
        "Sequence, a tf.data pipeline or torchdata nodes, and the script iterated none of them (a script that "
        "makes its own batches, by indexing arrays or a np.memmap, has no loader settings to change)"),
    r.WaitNotObservable: lambda x, d: (f"data wait is not observable here: {x.framework} pulls each batch inside "
                                       "its own runtime; the compute ceiling (feedprof tune) says how input-bound "
                                       "the job is"),
    r.OnlyWarmup: lambda x, d: (f"{x.batches} batches were delivered, all of them warm-up or epoch start-up: "
                                "nothing to measure in steady state (a longer run would say more)"),
    r.FewSteadyBatches: lambda x, d: f"only {x.batches} steady-state batches were measured: figures are rough",
    r.WindowNotReached: lambda x, d: (f"the script ended before the window was measured ({x.steady_batches} of "
                                      f"{x.window_batches} steady-state batches): figures cover what there was"),
    r.NotInstrumented: lambda x, d: f"could not instrument {x.adapter} ({x.error}); its loaders are not measured",
    r.RayClusterJoined: lambda x, d: (
        f"the script's ray.init() joined a Ray cluster that was already running ({x.address}): its training "
        "workers are that cluster's processes, out of reach of the run feedprof started, so their loaders were "
        "not measured. Run the script with a Ray of its own (ray.init() with no address, RAY_ADDRESS unset and no "
        "`ray start` cluster on this machine), or time the loader inside the training function with "
        "feedprof.profile() (docs/multi-process.md#ray-train)"),
    r.NoSuperInit: lambda x, d: (f"{x.dataset}.__init__ does not call super().__init__(**kwargs): Keras ignores "
                                 "its workers, use_multiprocessing and max_queue_size (feedprof set them to "
                                 "measure; add the call for them to take effect)"),
    r.EpochEndStall: lambda x, d: ("tf_keras stalls about 5 s at every epoch end when workers > 1 or "
                                   "use_multiprocessing=True (its enqueuer's queue timeout): with short epochs "
                                   "that can outweigh the gain; Keras 3 does not have this stall"),
    r.PinMemoryNoEffect: lambda x, d: "pin_memory has no effect here: the script does not move batches to a GPU",
    r.TrialTimedOut: lambda x, d: f"the trial did not finish within its {x.limit_s:.0f} s limit",
    r.NoBatchWithin: lambda x, d: (f"no data loader delivered a batch within {x.limit_s:g} s "
                                   f"(looked for {LOOKED_FOR})"),
    r.QueuedForResources: lambda x, d: (f"the Slurm step waited {fmt_seconds(x.waited_s)} for resources (job "
                                        f"{x.job} queued) before its tasks started: not counted against the trial"),
    r.QueueWaitTooLong: lambda x, d: (f"the Slurm step was still waiting for resources after "
                                      f"{fmt_seconds(x.waited_s)} (job {x.job} queued; the limit was "
                                      f"{fmt_seconds(x.limit_s)}): nothing was measured, and nothing is said "
                                      "about the config"),
    r.KilledBySignal: lambda x, d: f"the script was killed by {x.signal}",
    r.ExitedWithCode: lambda x, d: f"the trial process exited with code {x.exit_code}: {x.last_line or 'no output'}",
    r.ScriptFailed: _script_failed,
    r.ScriptExited: lambda x, d: f"the script called sys.exit({x.exit_code!r})",
    r.Interrupted: lambda x, d: "interrupted",
    r.RankFailed: lambda x, d: f"rank {x.rank}: {say(x.cause) or 'ended without its window'}",
    r.RanksLostConnection: lambda x, d: (
        f"{d(x.config) or 'a config'} was measured again: its first trial ended as a connection between the ranks "
        f"was reset (rank {x.rank}: {x.error}), the infrastructure's, not the config's"
        + (f" (that trial is kept in {x.trial_dir})" if x.trial_dir else "")),
    r.Straggler: lambda x, d: (
        f"rank {x.rank} is a straggler: it waits for data {fmt_pct(x.wait_fraction)} of the time, the other ranks "
        f"{fmt_pct(x.others_wait_fraction)}; they wait for it in the all-reduce (communication time, not data "
        "wait), so the job runs at its pace: look at what is different about that rank's data or node"),
    r.RankSpread: _rank_spread,
    r.NodesDiffer: _nodes_differ,
    r.OverMemoryBudget: lambda x, d: (f"predicted to need {fmt_bytes(x.need_bytes)} of memory "
                                      f"({fmt_bytes(x.per_worker_bytes)} per worker), more than the "
                                      f"{fmt_bytes(x.free_bytes)} free"),
    r.OverShmBudget: lambda x, d: (f"predicted to need {fmt_bytes(x.need_bytes)} of /dev/shm for batches in "
                                   f"flight, more than the {fmt_bytes(x.free_bytes)} free (in Docker: --shm-size "
                                   "or --ipc=host)"),
    r.LadderStoppedByTrial: lambda x, d: f"stopped adding workers at {x.knob}={x.n}: the trial {x.state}",
    r.ReachedCeiling: lambda x, d: f"{x.knob}={x.n} reaches the compute ceiling: more loader work cannot help",
    r.FlatRung: _flat,
    r.CpusSaturated: lambda x, d: (f"the CPUs are the limit ({x.cpu_cap} usable, saturated by the workers): more "
                                   f"than {x.cpu_cap} worker(s) cannot help"),
    r.PastCpuCount: lambda x, d: ("the workers left CPU time idle (waiting on I/O or on handing batches over), so "
                                  "more workers than CPUs were tried"),
    r.JumpedAhead: lambda x, d: (f"the workers wait on I/O and scale: jumped to {x.knob}={x.n}, the count "
                                 "predicted to reach the ceiling"),
    r.MaxWorkersReached: lambda x, d: f"reached the most workers allowed ({x.max_workers}, --max-workers)",
    r.RivalsRemeasured: lambda x, d: (f"{d(x.pick)} and {d(x.rival)} were within {fmt_pct(x.margin)} of each "
                                      f"other: both were measured again" +
                                      (f" ({x.repeats} times each)" if x.repeats > 1 else "") +
                                      (", in longer windows as the machine was busy" if x.busy else "")),
    r.MeasuredAgain: _again,
    r.ForkServerFailed: lambda x, d: f"trials ran cold: the fork server did not start ({x.error})",
    r.BusyMachine: lambda x, d: (
        f"other processes used {x.other_cores:.1f} of the {x.cpus} usable CPU(s) while the trials ran"
        + (f" (busiest: {', '.join(x.busiest)})" if x.busiest else "") + ": figures are noisier than on a quiet "
        "machine, repeats were used to tell configs apart, and CPU they took was not counted against the workers"),
    r.CeilingBelowLoading: lambda x, d: (
        f"the compute-ceiling trial replayed one batch at {fmt_rate(x.ceiling_batches_per_s)}, slower than "
        f"{d(x.loading_config)} loading for real ({fmt_rate(x.loading_batches_per_s)}): its step ran slower than "
        "beside real loading" + (f" (the training process at {x.main_cpu_pct:.0f} % of a CPU)"
                                 if x.main_cpu_pct is not None else "")
        + ", so it bounds nothing: a failed measurement, left out; the search went by the loop's data wait"),
    r.LoopBarelyWaits: lambda x, d: (f"stopped adding workers at {x.knob}={x.n}: the loop waits for data only "
                                     f"{fmt_pct(x.wait_fraction)} of the time (under {fmt_pct(x.below)}), so more "
                                     "loader work cannot help"),
    r.CeilingFailed: lambda x, d: (f"the compute-ceiling trial {x.state} ({say(x.cause) or 'no cause'}); "
                                   "figures are reported against the baseline only"),
    r.BudgetCutShort: _budget,
    r.TuneInterruptedEarly: lambda x, d: ("interrupted: the tune was stopped before it finished "
                                          "(feedprof tune --resume DIR goes on from here)"),
    r.BaselineNotMeasured: lambda x, d: (f"the script with its own settings: "
                                         f"{say(x.cause) if x.cause else 'no steady-state batches were measured'}"),
    r.NoLoaderAtSite: lambda x, d: (f"no data loader was built at --loader {x.site} (loaders seen: "
                                    f"{', '.join(x.seen) or 'none'})"),
    r.BaselineFigures: _baseline,
    r.KeepScriptSettings: lambda x, d: "The script's own settings are already the best found: leave them as they are.",
    r.NothingTried: _nothing_tried,
    r.PickFigures: _pick,
    r.CpusAreTheLimit: _cpu_limit,
    r.WorkersLeaveCpuIdle: _idle,
    r.NotTheLoader: lambda x, d: ("Not the loader: loader settings cannot make this job meaningfully faster "
                                  "(the loop hardly waits for its data, or already runs near the compute ceiling); "
                                  "look at the model step instead."),
    r.FewerWorkersDoAsWell: _fewer,
    r.ShortOfCeiling: lambda x, d: f"Still {fmt_pct(x.fraction_short)} short of the compute ceiling.",
    r.MeasuredRepeatedly: lambda x, d: (f"Measured {x.times} times, interleaved with its closest rival, because "
                                        "the two were within this machine's run-to-run noise."),
    r.LeadNotConfirmed: lambda x, d: (
        f"{d(x.rival)} was chosen at {fmt_rate(x.chosen_at_batches_per_s)}, but measured again beside the "
        f"script's own settings it ran {x.speedup:.2f}× as fast"
        + (f" (its windows ±{fmt_pct(x.spread)})" if x.spread else "") +
        ": no clear gain, and it costs no less, so the script's own settings are kept."),
    r.CheaperWithinNoise: lambda x, d: (
        f"{d(x.config)} is recommended over {d(x.rival)}: the latter measured {fmt_pct(x.rival_lead)} faster, "
        f"but on this machine a lead must pass {fmt_pct(x.noise)} to be told from noise (repeats of the same config "
        f"spread; {x.repeats} measurements each), so the two cannot be told apart, and fewer workers cost less memory "
        "and CPU."),
    r.PersistentWorkersComputed: lambda x, d: (
        f"persistent_workers=True: every epoch spends about {x.startup_s:.1f} s starting workers, "
        f"{fmt_pct(x.gain)} of a {fmt_seconds(x.epoch_s)} epoch "
        + ("(in this run feedprof's workers served the later epochs without that restart, as persistent workers "
           "do: the dataset was the same at every epoch start, checked)" if x.in_run else
           "(computed from the measured start-up, not trialled: epochs this long are too slow to measure twice)")),
    r.VersusAutotune: _versus_autotune,
    r.AppliesToEveryRank: lambda x, d: (
        f"The settings are per rank: each of the {x.local_ranks} rank(s) on this machine (of {x.world_size} in all) "
        "builds its own loader with this line"
        + (f", so the machine runs {x.local_ranks} × {x.workers_per_rank} = {x.local_ranks * x.workers_per_rank} "
           "workers" if x.workers_per_rank else "")
        + f"; a rank's CPU budget is {x.cpus} CPU(s) over {x.local_ranks} rank(s), less its own process "
          f"({x.cpu_cap} worker(s) when loading is CPU-bound)."),
    r.RayCpusReserved: _ray_cpus,
    r.SetByFlag: _by_flag,
    r.SetElsewhere: lambda x, d: (f"{x.knob} is set at {x.site} ({x.call}, {x.keyword}), not where the loader is "
                                  f"built ({x.loader_site}): change it there."),
    r.SettingSourceUnknown: _unknown_source,
    r.TrainerSuggestedWorkers: lambda x, d: (
        f"{x.trainer.capitalize()} warned that {x.loader} has few workers ({x.num_workers}) and suggested "
        f"num_workers={x.suggested}, from the CPU count alone; feedprof tune measures whether more workers pay off"),
    r.TrainerAdviceChecked: _advice,
    r.ThreadsVersusProcesses: _threads,
}


_WORDS.update(hazards.words(lambda reason: say(reason)))
_WORDS.update(origin.words())
_WORDS.update(advice.words())
_WORDS.update(online_checks.words())
_WORDS.update(beyond.words())
_WORDS.update(attach.words())
_WORDS.update(threads.words())


def say(reason: Optional[r.Reason], framework: str = "") -> str:
    """One finding in words (``framework`` names the configs in it)."""
    if reason is None:
        return ""
    words = _WORDS.get(type(reason))
    if words is None:  # a finding added without its words: say what there is, never fail
        return f"{reason.code}: {reason}"
    return words(reason, _describer(framework))



def paste_intro(paste_line: str, loader_site: str, code: Callable[[str], str] = lambda s: s) -> str:
    """What the paste replaces: the statement each line names (``# file:line``), not the loader's site
    (an HF Trainer's settings live in its TrainingArguments(...), lines above the Trainer(...) call)."""
    import re

    lines = [line for line in paste_line.splitlines() if line.strip()]
    sites = [m.group(1) for m in (re.search(r"  # (\S+:\d+)$", line) for line in lines) if m]
    runs = any(line.startswith("python ") for line in lines)  # paste.command_line's shape
    if not sites or len(sites) + runs < len(lines):  # a line that names no place: the loader's
        return "Run this:" if runs and len(lines) == 1 else f"Paste this at {code(loader_site)}:"
    then = ", and run the command line" if runs else ""
    if len(sites) == 1:
        return f"Paste this in place of the statement at {code(sites[0])}{then}:"
    where = ", ".join(code(s) for s in sites)
    return f"Paste each line in place of the statement it names ({where}){then}:"
