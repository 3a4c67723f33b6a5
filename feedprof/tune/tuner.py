"""``feedprof tune``: measure the script's own settings, the compute ceiling,
then search the loader knobs within a time budget, and recommend.

NOTE [ Tune data flow ]

    baseline trial (observe) ─► training loader (call site) + its settings
      ─► Space (knobs, costs)  ─► strategy.ask() ─► Proposal
                                          ▲            │ budget left? MemoryBudget.check: reject?
                                          │            ▼
                                     tell(Trial) ◄── run_trial (runner.py: a child process)
      after every trial: results.json rewritten (trials so far + current recommendation)
      at the end: analyse.recommend ─► Recommendation (figures and reason codes)

Nothing here measures, decides or words anything: the runner measures, the
strategy decides what to try, ``analyse.recommend`` what to recommend, and an
observer (render/progress.py, wired by app.py) shows it to a person. Resuming
is telling the strategy the saved trials, then asking.
"""
from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Callable, Dict, List, Optional, Sequence

from feedprof import defaults
from feedprof.analyse import noise, stats
from feedprof.analyse.diagnose import training_loader
from feedprof.analyse.limits import survivable
from feedprof.analyse.measured import epoch_gap_s, evidence_of_trials, trial_from_run
from feedprof.analyse.from_trials import tried_a_setting
from feedprof.analyse.recommend import keeps_own_settings, recommend
from feedprof.analyse.stragglers import ranks_per_node
from feedprof.store.reasons import (AppliesToEveryRank, BaselineNotMeasured, BudgetCutShort, CeilingFailed,
                                    ForkServerFailed, NoLoaderAtSite, NoLoaderIterated, NothingTried, QueueWaitTooLong,
                                    RayClusterJoined,
                                    Reason, TuneInterruptedEarly)
from feedprof.record.clock import MONOTONIC, Clock, now_iso
from feedprof.store import HostInfo, LoaderRecord, Phase, Recommendation, Role, Run, Trial, TrialState, TuneResult, TuneStart, save
from feedprof.frameworks.paste import Paste, with_launch
from feedprof.tune.budget import MemoryBudget
from feedprof.tune.job import TuneError, TuneInterrupted, TuneJob, TuneOptions
from feedprof.tune.machine import MachineFacts
from feedprof.tune.observer import SilentObserver, TuneObserver
from feedprof.trial.launch import script_launch
from feedprof.trial.protocol import Mode, site_matches
from feedprof.trial.runner import Injection, TrialInterrupted, TrialOptions, run_trial
from feedprof.trial.signals import deferred_signals
from feedprof.tune.ray_advice import picked_ranks, ray_advice
from feedprof.tune.space import Space
from feedprof.tune.spaces import make_space
from feedprof.tune.history import Proposal, Strategy
from feedprof.tune.strategy import LadderStrategy
from feedprof.trial.zygote import FORK_SAFE, Zygote, ZygoteError

BUDGET_MARGIN = 1.0  # start a trial only if this share of what it should take is left
FINISH_RESERVE_S = 5.0  # of the budget, kept for starting up and for writing the results and the report
BASELINE_TIMEOUT_MIN_S = 60.0  # the baseline may take the whole budget, and at least this long
TRIAL_TIMEOUT_FACTOR = 4.0  # a later trial may take this many times the baseline's wall time,
TRIAL_TIMEOUT_MIN_S = 30.0  # and at least this long
TIMEOUT_OVER_BUDGET_S = 3.0  # a trial's limit may pass the budget by this much (the budget is the user's promise)
EPOCH_SPAN_WINDOW_FACTOR = 3  # a trial that spans an epoch boundary measures this many windows
FIRST_RUNGS = 2  # a tune that tried nothing: the budget to suggest has room for this many of the ladder's rungs


def _no_loader(run: Optional[Run]) -> Reason:
    """Why no loader was measured: out of reach (a Ray job that joined a running cluster), or none iterated."""
    return next((n for n in (run.notes if run is not None else ()) if isinstance(n, RayClusterJoined)),
                NoLoaderIterated())


StrategyFactory = Callable[[Space, "TuneOptions", HostInfo], Strategy]


def ladder(space: Space, opts: TuneOptions, host: HostInfo) -> Strategy:
    return LadderStrategy(space, tol=opts.tolerance)


class Tuner:
    def __init__(self, job: TuneJob, options: TuneOptions, machine: MachineFacts,
                 observer: Optional[TuneObserver] = None, strategy: StrategyFactory = ladder,
                 clock: Clock = MONOTONIC, trial_runner: Optional[Callable[..., Run]] = None):
        self.script = os.path.abspath(job.script) if job.script else ""
        self.argv = list(job.argv)
        self.rank_argv: List[str] = []  # a launched job's: the script's arguments inside the launch command
        self.launch = job.launch or (script_launch(job.script, job.argv) if job.script else None)  # Ray Train
        self.out_dir = job.out_dir
        self.opts = options
        self.machine = machine
        self.host = machine.host
        self.observer: TuneObserver = observer or SilentObserver()
        self.results_path = os.path.join(job.out_dir, "results.json")
        os.makedirs(job.out_dir, exist_ok=True)
        self.clock = clock
        self.run_trial = trial_runner or (run_trial if self.launch is None else self._run_job)
        self.make_strategy = strategy
        self.trials: List[Trial] = []
        self.notes: List[Reason] = []
        self.started_s = clock.now_s()
        self.started_at = now_iso()
        self.space: Optional[Space] = None
        self.strategy: Optional[Strategy] = None
        self.loader: Optional[LoaderRecord] = None
        self.zygote: Optional[Zygote] = None
        previous = job.previous
        self._saved: List[Trial] = [t for t in previous.trials if t.state != TrialState.INTERRUPTED] \
            if previous else []
        self._elapsed_before = previous.duration_s if previous else 0.0
        if previous is not None:  # the strategy's notes and the busy machine's are derived again from the trials
            self.notes.extend(n for n in previous.notes if isinstance(n, (ForkServerFailed, CeilingFailed)))
        ram = options.max_memory_bytes if options.max_memory_bytes is not None else machine.ram_bytes
        self.memory = MemoryBudget(ram_bytes=ram, shm_bytes=machine.shm_bytes)
        self.cpu_cap = machine.cpu_cap

    # -- time ---------------------------------------------------------------

    def _run_job(self, script: str, argv: Sequence[str], trial_dir: str, host: HostInfo, opts: TrialOptions,
                 what: Injection, on_poll: Optional[Callable[[], None]], clock: Clock) -> Run:
        from feedprof.trial.jobrunner import run_job

        return run_job(self.launch, trial_dir, host, opts, what, on_poll, clock)

    def elapsed(self) -> float:
        return self.clock.now_s() - self.started_s + self._elapsed_before

    def remaining(self) -> float:
        """What is left of the budget for trials: the process started before the
        tuner did, and writing the results and the report comes after."""
        return self.opts.budget_s - FINISH_RESERVE_S - self.elapsed()

    def _tick(self) -> None:
        self.observer.tick(self.elapsed(), self.opts.budget_s)

    # -- results ------------------------------------------------------------

    def result(self, complete: bool, stop_reason: Optional[Reason]) -> TuneResult:
        rec = None
        if self.space is not None and self.trials:
            sp = self.space
            rec = recommend(self.trials, sp, tol=self.opts.tolerance, cpu_cap=self.cpu_cap,
                            ram_budget_bytes=self.memory.ram_bytes,
                            fits=lambda c: self.memory.check(sp.workers(c), sp.in_flight(c)) is None,
                            nothing_tried=self._nothing_tried(complete, stop_reason))
            if rec is not None:  # the script's own settings: nothing to paste (the reasons say so)
                paste = Paste("") if keeps_own_settings(rec) else \
                    sp.paste(rec.config, self.loader, self.script, self.rank_argv or self.argv)
                line = with_launch(paste.line, self.script, self.launch.command) if self.launch else paste.line
                ray, reserve = ray_advice(picked_ranks(self.trials, rec), rec, self.script, self.machine.cpus_usable, self.cpu_cap,
                                          self.strategy.notes if self.strategy else ())
                rec = dataclasses.replace(rec, config_text=sp.describe(rec.config),
                                          paste_line="\n".join(t for t in (line, reserve) if t),
                                          loader_site=self.loader.site if self.loader else "",
                                          reasons=rec.reasons + tuple(paste.findings) + tuple(sp.notes())
                                          + self._per_rank_reason(rec, ray))
        return TuneResult(
            script=self.script, argv=tuple(self.argv), framework=self.space.framework if self.space else "",
            loader_site=self.loader.site if self.loader else "", started_at=self.started_at,
            duration_s=self.elapsed(), budget_s=self.opts.budget_s, complete=complete, stop_reason=stop_reason,
            host=self.host, recommendation=rec, trials=tuple(self.trials),
            evidence=tuple(evidence_of_trials(self.trials)),
            launch=tuple(self.launch.command) if self.launch else (),
            notes=tuple(self.notes + (self.strategy.notes if self.strategy else []) + self._busy()))

    def _nothing_tried(self, complete: bool, stop_reason: Optional[Reason]) -> Optional[NothingTried]:
        """A tune that stopped (or has not yet gone on) before any loader setting
        was tried: what ran took, what one trial of a setting takes, and the
        --budget that has room for the worker ladder's first rungs (as the
        search decides it: a trial starts only if its typical time is left)."""
        if complete or tried_a_setting(self.trials):
            return None
        spent = self.elapsed()
        trial_s = self._typical_trial_s() or None
        needed = None
        if trial_s is not None:
            needed = spent + FIRST_RUNGS * BUDGET_MARGIN * trial_s + FINISH_RESERVE_S
            needed = 10.0 * math.ceil(needed / 10.0)  # a round figure, up
        return NothingTried(budget_s=self.opts.budget_s, spent_s=spent,
                            ceiling=any(t.role == Role.CEILING and t.state == TrialState.OK for t in self.trials),
                            trial_s=trial_s, rungs=FIRST_RUNGS, needed_s=needed,
                            budget_ran_out=isinstance(stop_reason, BudgetCutShort))

    def _per_rank_reason(self, rec: Recommendation, ray: Optional[Reason] = None) -> tuple:
        """Every rank's share of the machine (a Ray Train job's: what Ray reserves per worker)."""
        base = self.trials[0].run if self.trials and self.trials[0].run is not None else None
        if self.launch is None or base is None or not base.ranks:
            return ()
        info = [r.rank for r in base.ranks if r.rank is not None]
        from feedprof.analyse.diagnose import workers_of

        every = AppliesToEveryRank(local_ranks=self.memory.ranks, world_size=max([i.world_size for i in info] + [1]),
                                   workers_per_rank=workers_of(rec.config), cpus=self.machine.cpus_usable,
                                   cpu_cap=self.cpu_cap)
        picked = next((t.run for t in self.trials if t.index == rec.trial_index and t.run is not None), None)
        notes = picked.summary.notes if picked is not None and picked.summary else ()
        spread = [n for n in notes if n.code == "rank_spread"][:1] + [n for n in notes if n.code == "nodes_differ"][:1]
        return (ray or every, *spread)

    def _busy(self) -> List[Reason]:
        busy = noise.busy_machine(self.trials, self.machine.cpus_usable)
        return [busy] if busy is not None else []

    def save(self, complete: bool = False, stop_reason: Optional[Reason] = None) -> TuneResult:
        res = self.result(complete, stop_reason)
        save(res, self.results_path)
        return res

    # -- trials ---------------------------------------------------------------

    def _trial_options(self, overrides: Dict[str, Any], timeout_s: Optional[float]) -> TrialOptions:
        o = self.opts
        opts = TrialOptions(window_batches=o.window_batches, window_seconds=o.window_seconds,
                            min_window_batches=o.min_window_batches, warmup_batches=o.warmup_batches,
                            interval_s=o.interval_s, gpu=o.gpu, timeout_s=timeout_s,
                            loader_timeout_s=o.loader_timeout_s, capture_output=True, zygote=self.zygote,
                            queue_timeout_s=max(1.0, self.remaining()))  # a Slurm step's wait: the budget's
        return dataclasses.replace(opts, **overrides)

    def _measure(self, proposal: Proposal, what: Injection, overrides: Dict[str, Any],
                 timeout_s: Optional[float]) -> Trial:
        index = len(self.trials)
        text = self.describe_trial(proposal.role, proposal.config)
        self.observer.trial_started(index, self._planned(), proposal.role, text, self.elapsed(), self.opts.budget_s)
        trial_dir = os.path.join(self.out_dir, "trials", f"{index:02d}-{proposal.role}")
        fields = dict(phase=proposal.phase, config_text=text)
        try:
            run = self.run_trial(self.script, self.argv, trial_dir, self.host,
                                 self._trial_options(overrides, timeout_s), what=what, on_poll=self._tick,
                                 clock=self.clock)
        except TrialInterrupted as stop:
            if stop.run is not None:
                self.trials.append(trial_from_run(index, proposal.role, proposal.config, stop.run, **fields))
            raise
        trial = trial_from_run(index, proposal.role, proposal.config, run, **fields)
        self.trials.append(trial)
        self.observer.trial_done(trial)
        return trial

    def describe(self, config: Dict[str, Any]) -> str:
        """A config as keywords (before the baseline found the loader: "")."""
        return self.space.describe(config) if self.space is not None else ""

    def describe_trial(self, role: Role, config: Dict[str, Any]) -> str:
        """A trial's config as keywords; "" for the ceiling (it replays a batch)."""
        return "" if role == Role.CEILING else self.describe(config)

    def _measured_before(self, config: Dict[str, Any]) -> bool:
        """Was ``config`` measured already (the next trial would confirm it, or its figure)?"""
        sp = self.space
        return sp is not None and any(sp.key(t.config) == sp.key(config) for t in self.trials
                                      if t.state == TrialState.OK and t.role != Role.CEILING)

    def _typical_trial_s(self, proposal: Optional[Proposal] = None) -> float:
        """What a trial costs, from the median of the successful ones so far (a
        timed-out trial says nothing about the next one), and what a longer
        window asked for adds."""
        typical = stats.median([t.duration_s for t in self.trials if t.state == TrialState.OK and t.duration_s]) or 0.0
        factor = proposal.window_factor if proposal is not None else 1.0
        typical += (factor - 1) * self.opts.window_seconds
        extra = proposal.min_window_batches if proposal is not None else None
        if extra and self.loader is not None:
            best = max((t for t in self.trials if t.state == TrialState.OK and t.batches_per_s), default=None,
                       key=lambda t: t.batches_per_s)
            if best is not None:  # a longer window: the extra batches at the best rate so far
                typical += extra / best.batches_per_s
        return typical

    def _planned(self) -> Optional[int]:
        """A rough 'of n' for the progress line: trials the budget still allows."""
        per = self._typical_trial_s()
        if not per:
            return None
        return len(self.trials) + 1 + max(0, math.floor((self.remaining() - per) / per))

    def _record(self, trial: Trial) -> None:
        """A trial that did not run (rejected before it started)."""
        self.trials.append(trial)
        self.observer.trial_done(trial)

    # -- the tune -------------------------------------------------------------

    def run(self) -> TuneResult:
        try:
            return self._run_tune()
        except (TrialInterrupted, KeyboardInterrupt):
            # Ctrl-C or SIGTERM, during a trial (the runner has reaped it and
            # _measure kept what it measured) or between trials: keep every trial.
            with deferred_signals():
                result = self.save(False, TuneInterruptedEarly())
            raise TuneInterrupted(result) from None
        finally:
            with deferred_signals():  # a second Ctrl-C must not leave the fork server behind
                if self.zygote is not None:
                    self.zygote.close()
                    self.zygote = None

    def _start_zygote(self, modules: Sequence[str]) -> None:
        """Later trials fork from a process that imported the script's heavy
        frameworks once (only those known to be fork-safe after import)."""
        preload = [m for m in modules if m in FORK_SAFE]
        if not preload or not self.opts.fork_trials or self.launch is not None:
            return  # a job's ranks are started by its own launcher
        try:
            self.zygote = Zygote(preload)
        except (ZygoteError, OSError) as exc:
            self.notes.append(ForkServerFailed(error=str(exc)))

    def _start(self) -> TuneStart:
        return TuneStart(script=self.script, launch=tuple(self.launch.command) if self.launch else (),
                         budget_s=self.opts.budget_s, cpu_cap=self.cpu_cap, host=self.host,
                         results_path=self.results_path)

    def _run_tune(self) -> TuneResult:
        self.observer.tune_started(self._start())
        baseline = self._baseline()
        self._start_zygote(baseline.run.modules)
        self._charge_epoch_gap()
        self._tell_strategy()
        self.observer.loader_found(self.loader, self.space.describe(self.loader.config))
        self.save()
        stop_reason: Optional[Reason] = None
        while True:
            proposal = self.strategy.ask()
            if proposal is None:
                break
            if self.remaining() < BUDGET_MARGIN * self._typical_trial_s(proposal):
                if proposal.optional:  # the search is done; what it would add does not fit
                    break
                stop_reason = BudgetCutShort(budget_s=self.opts.budget_s, next_config=None
                                             if proposal.role == Role.CEILING else dict(proposal.config),
                                             again=self._measured_before(proposal.config))
                break
            trial = self._trial_of(proposal, baseline)
            if isinstance(trial.cause, QueueWaitTooLong):  # the budget went on waiting: no evidence about it
                stop_reason = trial.cause
                break
            self.strategy.tell(trial)
            if self._charge_epoch_gap():
                self._tell_strategy()
            self.save()
        self.observer.tune_done()
        if baseline.state != TrialState.OK and not any(t.state == TrialState.OK and t.role != Role.CEILING
                                                       for t in self.trials):
            reason = BaselineNotMeasured(state=baseline.state.value, cause=baseline.cause)
            raise TuneError(reason, self.save(False, reason))  # nothing survived: as if the baseline alone ran
        return self.save(stop_reason is None, stop_reason)

    def _charge_epoch_gap(self) -> bool:
        """What the loop does between epochs outside the loader (validation,
        checkpoints) costs the same whatever the loader's config, and a trial
        inside one epoch never sees it: measured by any trial that crossed a
        boundary, it is charged per epoch to every trial that did not, so
        configs are compared and reported with it. True: the charge changed."""
        gaps = [g for g in (epoch_gap_s(t) for t in self.trials) if g is not None]
        gap = stats.median(gaps) if gaps else None
        charged = [dataclasses.replace(t, epoch_gap_s=gap if t.run is not None and epoch_gap_s(t) is None else None)
                   for t in self.trials]
        changed = charged != self.trials
        self.trials = charged
        return changed

    def _tell_strategy(self) -> None:
        """A new strategy told every trial so far (it keeps nothing but them)."""
        self.strategy = self.make_strategy(self.space, self.opts, self.host)
        for trial in self.trials:
            self.strategy.tell(trial)

    def _trial_of(self, proposal: Proposal, baseline: Trial) -> Trial:
        """Run one proposal (or reject it before it runs), learn from it."""
        sp = self.space
        workers, in_flight = sp.workers(proposal.config), sp.in_flight(proposal.config)
        over = self.memory.check(workers, in_flight) if proposal.role != Role.CEILING else None
        if over is not None:
            trial = Trial(index=len(self.trials), role=proposal.role, config=dict(proposal.config),
                          state=TrialState.REJECTED, cause=over, phase=proposal.phase,
                          config_text=self.describe_trial(proposal.role, proposal.config))
            self._record(trial)
            return trial
        o = self.opts
        overrides: Dict[str, Any] = {}
        factor = proposal.window_factor  # a longer window: measured again, or confirming the pick
        if factor != 1.0:
            overrides.update(window_seconds=factor * o.window_seconds, window_batches=int(factor * o.window_batches))
        if proposal.min_window_batches is not None:  # e.g. persistent_workers: span epoch boundaries
            overrides["min_window_batches"] = proposal.min_window_batches
            overrides["window_batches"] = max(overrides.get("window_batches", o.window_batches),
                                              proposal.min_window_batches)
            overrides["window_seconds"] = max(EPOCH_SPAN_WINDOW_FACTOR, factor) * o.window_seconds
        limit = o.trial_timeout_s or max(TRIAL_TIMEOUT_MIN_S, TRIAL_TIMEOUT_FACTOR * baseline.duration_s)
        mode = Mode.CEILING if proposal.role == Role.CEILING else Mode.INJECT
        what = Injection(mode=mode, config=dict(proposal.config), framework=self.loader.framework,
                         chain=tuple(self.loader.call_chain))
        trial = self._measure(proposal, what, overrides,
                              timeout_s=min(limit, max(TIMEOUT_OVER_BUDGET_S, self.remaining() + TIMEOUT_OVER_BUDGET_S)))
        if trial.state == TrialState.OK and proposal.role != Role.CEILING:
            self.memory.learn(trial, workers, in_flight)
        if trial.state in (TrialState.KILLED, TrialState.FAILED):  # with what the config needed, where known
            trial = dataclasses.replace(trial, cause=self.memory.explain(trial.cause, workers, in_flight))
            self.trials[trial.index] = trial
        if trial.state != TrialState.OK and proposal.role == Role.CEILING:
            self.notes.append(CeilingFailed(state=trial.state.value, cause=trial.cause))
        return trial

    def _baseline(self) -> Trial:
        """The script's own settings: measured (or taken from a resumed tune), the
        training loader found, the search space built around it."""
        o = self.opts
        saved = next((t for t in self._saved if t.role == Role.BASELINE), None)
        if saved is not None and (saved.state == TrialState.OK or survivable(saved)):
            self.trials = list(self._saved)
            for t in self.trials:
                self.observer.trial_done(t)
            baseline = saved
        else:
            proposal = Proposal({}, Role.BASELINE, Phase.BASELINE)
            what = Injection(site=o.loader_site)
            baseline = self._measure(proposal, what, {}, timeout_s=o.trial_timeout_s or max(BASELINE_TIMEOUT_MIN_S,
                                                                                              o.budget_s))
        rec = self._training_loader(baseline)
        self.loader = rec
        if self.launch is not None:
            self._per_rank(baseline.run)
        max_w = o.max_workers or defaults.max_workers(self.cpu_cap)
        self.space = make_space(rec.framework, rec.config, self.cpu_cap, max_w, baseline.run.cuda_used)
        self.space.allow_reorder = o.allow_reorder  # (tune/space_order.py)
        cause = baseline.cause
        if baseline.state in (TrialState.KILLED, TrialState.FAILED):  # the script's worker count, not the sampled
            cause = self.memory.explain(cause, self.space.workers(rec.config), self.space.in_flight(rec.config))
        baseline = dataclasses.replace(baseline, config=self.space.legalize(dict(rec.config)),
                                       config_text=self.space.describe(rec.config), cause=cause)
        self.trials[baseline.index] = baseline
        for t in self.trials:
            if t.state == TrialState.OK and t.role != Role.CEILING:
                self.memory.learn(t, self.space.workers(t.config), self.space.in_flight(t.config))
        return baseline

    def _per_rank(self, run: Run) -> None:
        """A job's knobs are per rank: each rank's CPU budget is the machine's CPUs
        over the ranks on it, less the rank's own process; memory counts every rank."""
        self.script = run.script or self.script
        self.rank_argv = list(next((r.argv for r in run.ranks if r.argv), ()))  # the script's own, in the launch
        local = max([r.rank.local_world_size for r in run.ranks if r.rank] + [ranks_per_node(run), 1])
        shares = [r.rank.cpus for r in run.ranks if r.rank and r.rank.cpus]  # what each rank may use (Slurm's say)
        if shares:
            self.cpu_cap = max(1, min(shares) - (1 if local > 1 else 0))
        elif local > 1:
            self.cpu_cap = max(1, self.machine.cpus_usable // local - 1)
        self.memory.ranks = local

    def _training_loader(self, baseline: Trial) -> LoaderRecord:
        run = baseline.run
        rec = training_loader(run) if run is not None else None
        if not survivable(baseline) and (baseline.state != TrialState.OK or rec is None or not baseline.batches_per_s):
            cause = baseline.cause if baseline.state != TrialState.OK else (
                _no_loader(run) if rec is None else None)
            reason = BaselineNotMeasured(state=baseline.state.value, cause=cause)
            out_of_reach = isinstance(cause, RayClusterJoined)  # (what to run instead, as for a bad input)
            raise TuneError(reason, self.save(False, reason), **({"exit_code": 2} if out_of_reach else {}))
        site = self.opts.loader_site
        if site and not site_matches(site, rec.call_chain):
            reason = NoLoaderAtSite(site=site, seen=tuple(sorted({r.site for r in run.loaders if r.site})))
            raise TuneError(reason, self.save(False, reason), exit_code=2)
        return rec
