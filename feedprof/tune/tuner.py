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
import functools
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from feedprof.store.knobs.threads import threads_apart
from feedprof import defaults
from feedprof.analyse import noise
from feedprof.analyse.diagnose import training_loader
from feedprof.analyse.limits import connection_lost, survivable
from feedprof.analyse.measured import charged_epoch_gaps, evidence_of_trials, trial_from_run
from feedprof.analyse.from_trials import tried_a_setting
from feedprof.analyse.recommend import keeps_own_settings, recommend
from feedprof.store.reasons import (BaselineNotMeasured, BudgetCutShort, CeilingFailed,
                                    ForkServerFailed, NoLoaderAtSite, NoLoaderIterated, NothingTried, QueueWaitTooLong,
                                    RanksLostConnection, RayClusterJoined, Reason, TuneInterruptedEarly)
from feedprof.record.clock import MONOTONIC, Clock, now_iso
from feedprof.store import HostInfo, LoaderRecord, Phase, Recommendation, Role, Run, Trial, TrialState, TuneResult, TuneStart, save
from feedprof.frameworks.paste import Paste, with_launch
from feedprof.tune.budget import MemoryBudget
from feedprof.tune.job import TuneError, TuneInterrupted, TuneJob, TuneOptions
from feedprof.tune.machine import MachineFacts, job_cpu_cap
from feedprof.tune.observer import SilentObserver, TuneObserver
from feedprof.trial.launch import Launch, script_launch
from feedprof.trial.protocol import Mode, site_matches
from feedprof.trial.runner import Injection, TrialInterrupted, TrialOptions, run_trial
from feedprof.trial.signals import deferred_signals
from feedprof.tune.ray_advice import picked_ranks, ray_advice
from feedprof.tune.space import Space
from feedprof.tune.spaces import make_space
from feedprof.tune.history import Proposal, Strategy
from feedprof.tune.ranks import rank_reasons
from feedprof.tune.time_budget import FIRST_RUNGS, REST_OF_CLIMB, TimeBudget, trial_options, window_of
from feedprof.tune.strategy import LadderStrategy
from feedprof.trial.zygote import FORK_SAFE, Zygote, ZygoteError



def _no_loader(run: Optional[Run]) -> Reason:
    """Why no loader was measured: out of reach (a Ray job that joined a running cluster), or none iterated."""
    return next((n for n in (run.notes if run is not None else ()) if isinstance(n, RayClusterJoined)),
                NoLoaderIterated())


def _job_trial(launch: Launch, script: str, argv: Sequence[str], trial_dir: str, host: HostInfo, opts: TrialOptions,
               what: Injection, on_poll: Optional[Callable[[], None]], clock: Clock) -> Run:
    """A trial of a launched job (trial/jobrunner.py), called as a trial of a script is."""
    from feedprof.trial.jobrunner import run_job  # (a script's tune never loads the job runner)

    return run_job(launch, trial_dir, host, opts, what, on_poll, clock)


def measured_before(space: Optional[Space], trials: Sequence[Trial], config: Dict[str, Any]) -> bool:
    """Was ``config`` measured already (the next trial would confirm it, or its figure)?"""
    return space is not None and any(space.key(t.config) == space.key(config) for t in trials
                                     if t.state == TrialState.OK and t.role != Role.CEILING)


def trial_dir(out_dir: str, index: int, role: Role) -> str:
    return os.path.join(out_dir, "trials", f"{index:02d}-{role}")


def set_aside(out_dir: str, trial: Trial) -> str:
    """A trial measured again: its directory kept beside, named for what ended it ("": none to keep)."""
    where = trial_dir(out_dir, trial.index, trial.role)
    try:
        os.replace(where, where + "-connection-lost")
    except OSError:  # (it wrote no directory, or one of that name is there from a resumed tune)
        return ""
    return where + "-connection-lost"


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
        self.run_trial = trial_runner or (run_trial if self.launch is None else functools.partial(_job_trial, self.launch))
        self.make_strategy = strategy
        self.trials: List[Trial] = []
        self.notes: List[Reason] = []
        self.started_at = now_iso()
        self.space: Optional[Space] = None
        self.strategy: Optional[Strategy] = None
        self.loader: Optional[LoaderRecord] = None
        self.zygote: Optional[Zygote] = None
        previous = job.previous
        self._saved: List[Trial] = [t for t in previous.trials if t.state != TrialState.INTERRUPTED] \
            if previous else []
        self.time = TimeBudget(clock, options, clock.now_s(), previous.duration_s if previous else 0.0)
        if previous is not None:  # the strategy's notes and the busy machine's are derived again from the trials
            self.notes.extend(n for n in previous.notes if isinstance(n, (ForkServerFailed, CeilingFailed)))
        ram = options.max_memory_bytes if options.max_memory_bytes is not None else machine.ram_bytes
        self.memory = MemoryBudget(ram_bytes=ram, shm_bytes=machine.shm_bytes)
        self.cpu_cap = machine.cpu_cap

    # -- time ---------------------------------------------------------------

    def _tick(self) -> None:
        self.observer.tick(self.time.elapsed(), self.opts.budget_s)

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
                rec = dataclasses.replace(rec, config_text=sp.describe(rec.config), **threads_apart(rec.config),
                                          paste_line="\n".join(t for t in (line, reserve) if t),
                                          loader_site=self.loader.site if self.loader else "",
                                          reasons=rec.reasons + tuple(paste.findings) + tuple(sp.notes())
                                          + self._every_rank(rec, ray))
        return TuneResult(
            script=self.script, argv=tuple(self.argv), framework=self.space.framework if self.space else "",
            loader_site=self.loader.site if self.loader else "", started_at=self.started_at,
            duration_s=self.time.elapsed(), budget_s=self.opts.budget_s, complete=complete, stop_reason=stop_reason,
            host=self.host, recommendation=rec, trials=tuple(self.trials),
            evidence=tuple(evidence_of_trials(self.trials)),
            launch=tuple(self.launch.command) if self.launch else (),
            notes=tuple(self.notes + (self.strategy.notes if self.strategy else [])
                        + [b for b in (noise.busy_machine(self.trials, self.machine.cpus_usable),) if b is not None]))

    def _every_rank(self, rec: Recommendation, ray: Optional[Reason]) -> Tuple[Reason, ...]:
        if self.launch is None:
            return ()
        return rank_reasons(self.trials, rec, ray, self.memory.ranks, self.machine.cpus_usable, self.cpu_cap)

    def _nothing_tried(self, complete: bool, stop_reason: Optional[Reason]) -> Optional[NothingTried]:
        """A tune that stopped (or has not yet gone on) before any loader setting
        was tried: what ran took, what one trial of a setting takes, and the
        --budget that has room for the worker ladder's first rungs (as the
        search decides it: a trial starts only if its typical time is left)."""
        if complete or tried_a_setting(self.trials):
            return None
        return NothingTried(budget_s=self.opts.budget_s, spent_s=self.time.elapsed(),
                            ceiling=any(t.role == Role.CEILING and t.state == TrialState.OK for t in self.trials),
                            trial_s=self.time.typical_trial_s(self.trials) or None, rungs=FIRST_RUNGS,
                            needed_s=self.time.needed_s(self.trials),
                            budget_ran_out=isinstance(stop_reason, BudgetCutShort))

    def save(self, complete: bool = False, stop_reason: Optional[Reason] = None) -> TuneResult:
        res = self.result(complete, stop_reason)
        save(res, self.results_path)
        return res

    # -- trials ---------------------------------------------------------------

    def _measure(self, proposal: Proposal, what: Injection, window: Dict[str, Any],
                 timeout_s: Optional[float]) -> Trial:
        index = len(self.trials)
        text = self.describe_trial(proposal.role, proposal.config)
        self.observer.trial_started(index, self.time.planned(self.trials), proposal.role, text, self.time.elapsed(),
                                    self.opts.budget_s)
        where = trial_dir(self.out_dir, index, proposal.role)
        fields = dict(phase=proposal.phase, config_text=text)
        try:
            options = trial_options(self.opts, window, timeout_s, self.time.remaining(), self.zygote)
            run = self.run_trial(self.script, self.argv, where, self.host, options, what=what, on_poll=self._tick,
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
            if not self.time.allows(self.trials, proposal, self.loader is not None):
                if proposal.optional:  # the search is done; what it would add does not fit
                    break
                climbing = proposal.phase == Phase.LADDER  # (a ladder goes on only while its rungs gain)
                stop_reason = BudgetCutShort(budget_s=self.opts.budget_s, next_config=None
                                             if proposal.role == Role.CEILING else dict(proposal.config),
                                             again=measured_before(self.space, self.trials, proposal.config), climbing=climbing,
                                             needed_s=self.time.needed_s(self.trials, REST_OF_CLIMB)
                                             if climbing else None)
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
        """What the loop does between epochs, measured by any trial, charged to those that did not
        see it (analyse/measured.py charged_epoch_gaps). True: the charge changed."""
        charged = charged_epoch_gaps(self.trials)
        changed, self.trials = charged != self.trials, charged
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
        mode = Mode.CEILING if proposal.role == Role.CEILING else Mode.INJECT
        what = Injection(mode=mode, config=dict(proposal.config), framework=self.loader.framework,
                         chain=tuple(self.loader.call_chain))
        trial = self._measure(proposal, what, window_of(self.opts, proposal), self.time.trial_timeout_s(baseline))
        lost = connection_lost(trial)
        if lost is not None:  # between the ranks: the infrastructure's, not the config's; once more, apart
            self.notes.append(RanksLostConnection(config=dict(proposal.config), rank=lost[0], error=lost[1],
                                                  trial_dir=set_aside(self.out_dir, self.trials.pop())))
            trial = self._measure(proposal, what, window_of(self.opts, proposal), self.time.trial_timeout_s(baseline))
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
            baseline = self._measure(proposal, what, {}, timeout_s=self.time.baseline_timeout_s())
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
        self.cpu_cap, self.memory.ranks = job_cpu_cap(run, self.machine.cpus_usable, self.cpu_cap)

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
