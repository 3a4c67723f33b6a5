"""``feedprof tune``: measure the script's own settings, the compute ceiling,
then search the loader knobs within a time budget, and recommend.

NOTE [ Tune data flow ]

    baseline trial (observe) ─► training loader (call site) + its settings
      ─► Space (knobs, costs)  ─► LadderStrategy.ask() ─► Proposal
                                          ▲                  │ MemoryBudget.check: reject?
                                          │                  ▼
                                     tell(Trial) ◄── runner.run_trial (child process)
      after every trial: results.json rewritten (trials so far + current recommendation)
      at the end: analyse.recommend ─► Recommendation ─► table, paste-ready line

Nothing here measures or decides: the runner measures, the strategy decides
what to try, ``analyse.recommend`` decides what to recommend.
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from feedprof.analyse.diagnose import training_loader
from feedprof.analyse.recommend import PICK_TOLERANCE, recommend, trial_from_run
from feedprof.record.gpu import open_gpu
from feedprof.record.host import host_info, local_world_size, usable_cpu_count
from feedprof.render.progress import ConsoleProgress, NullProgress, format_recommendation
from feedprof.session import now_iso
from feedprof.store import HostInfo, LoaderRecord, Trial, TuneResult, save
from feedprof.tune.budget import MemoryBudget
from feedprof.tune.protocol import MODE_CEILING, MODE_INJECT, MODE_OBSERVE, site_matches
from feedprof.tune.runner import TrialInterrupted, TrialOptions, run_trial
from feedprof.tune.signals import deferred_signals
from feedprof.tune.space import Space, make_space
from feedprof.tune.strategy import LadderStrategy, Proposal
from feedprof.tune.zygote import FORK_SAFE, Zygote, ZygoteError

DEFAULT_BUDGET_S = 120.0


@dataclass
class TuneOptions:
    budget_s: float = DEFAULT_BUDGET_S
    max_workers: Optional[int] = None  # default: max(32, 2 × usable CPUs)
    loader_site: Optional[str] = None  # FILE:LINE of the loader to tune (default: the busiest)
    window_seconds: float = 2.0  # steady state measured per trial
    window_batches: int = 2000
    min_window_batches: int = 30  # five chunks of a few batches, for the spread
    warmup_batches: int = 5
    interval_s: float = 0.2
    gpu: bool = True
    loader_timeout_s: float = 120.0
    trial_timeout_s: Optional[float] = None  # default: 4 × the baseline trial
    tolerance: float = PICK_TOLERANCE
    fork_trials: bool = True  # fork trials from a process that imported the framework once (zygote.py)



class TuneError(Exception):
    """The tune could not go on; ``result`` holds what was measured."""

    def __init__(self, message: str, result: TuneResult, exit_code: int = 1):
        super().__init__(message)
        self.result = result
        self.exit_code = exit_code


class TuneInterrupted(Exception):
    def __init__(self, result: TuneResult):
        super().__init__("interrupted")
        self.result = result


def default_max_workers(cpu_cap: int) -> int:
    return max(32, 2 * cpu_cap)


class Tuner:
    def __init__(self, script: str, argv: Sequence[str], out_dir: str, options: TuneOptions,
                 progress: Optional[ConsoleProgress] = None, previous: Optional[TuneResult] = None):
        self.script = os.path.abspath(script)
        self.argv = list(argv)
        self.out_dir = out_dir
        self.opts = options
        self.progress = progress or NullProgress()
        self.results_path = os.path.join(out_dir, "results.json")
        self.trials: List[Trial] = []
        self.notes: List[str] = []
        self.started = time.monotonic()
        self.started_at = now_iso()
        self.space: Optional[Space] = None
        self.strategy: Optional[LadderStrategy] = None
        self.loader: Optional[LoaderRecord] = None
        self.zygote: Optional[Zygote] = None
        # --resume: trials measured before, told to the strategy again instead of re-run
        self._replay: List[Trial] = [t for t in previous.trials if t.state != "interrupted"] if previous else []
        self._elapsed_before = previous.duration_s if previous else 0.0
        if previous is not None:
            self.notes.extend(n for n in previous.notes if n not in self.notes)
        self.memory = MemoryBudget.of_this_machine()
        self.cpu_cap = max(1, usable_cpu_count() // local_world_size())
        gpu = open_gpu() if options.gpu else None
        self.host: HostInfo = host_info(gpu_status=gpu.status if gpu else "GPU: sampling turned off",
                                        gpus=gpu.devices if gpu else ())
        if gpu:
            gpu.close()

    # -- time ---------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.started + self._elapsed_before

    def remaining(self) -> float:
        return self.opts.budget_s - self.elapsed()

    def _tick(self) -> None:
        self.progress.tick(self.elapsed(), self.opts.budget_s)

    # -- results ------------------------------------------------------------

    def result(self, complete: bool, stop_reason: str) -> TuneResult:
        rec = None
        if self.space is not None and self.trials:
            sp = self.space
            rec = recommend(self.trials, sp.framework, sp.cost, sp.describe,
                            lambda cfg: sp.code(cfg, self.loader, self.script),
                            loader_site=self.loader.site if self.loader else "", cpu_cap=self.cpu_cap,
                            notes=sp.notes() + ([stop_reason] if not complete and stop_reason else []),
                            tol=self.opts.tolerance, finalize=lambda t, trials: sp.finalize(t, self.opts.tolerance, list(trials)),
                            cpu_bound=sp.cpu_bound)
        return TuneResult(
            script=self.script, argv=tuple(self.argv), framework=self.space.framework if self.space else "",
            loader_site=self.loader.site if self.loader else "", started_at=self.started_at,
            duration_s=self.elapsed(), budget_s=self.opts.budget_s, complete=complete, stop_reason=stop_reason,
            host=self.host, recommendation=rec, trials=tuple(self.trials),
            notes=tuple(self.notes + (self.strategy.notes if self.strategy else [])))

    def save(self, complete: bool = False, stop_reason: str = "") -> TuneResult:
        res = self.result(complete, stop_reason)
        save(res, self.results_path)
        return res

    # -- trials ---------------------------------------------------------------

    def _trial_options(self, overrides: Dict[str, Any], timeout_s: Optional[float]) -> TrialOptions:
        o = self.opts
        opts = TrialOptions(window_batches=o.window_batches, window_seconds=o.window_seconds,
                            min_window_batches=o.min_window_batches, warmup_batches=o.warmup_batches,
                            interval_s=o.interval_s, gpu=o.gpu, timeout_s=timeout_s,
                            loader_timeout_s=o.loader_timeout_s, capture_output=True, zygote=self.zygote)
        return dataclasses.replace(opts, **overrides)

    def _run(self, role: str, mode: str, config: Dict[str, Any],
             overrides: Optional[Dict[str, Any]] = None, timeout_s: Optional[float] = None,
             target: Optional[Dict[str, Any]] = None) -> Trial:
        index = len(self.trials)
        resumed = self._resumed(role, config)
        if resumed is not None:
            trial = dataclasses.replace(resumed, index=index)
            self.trials.append(trial)
            self.progress.trial_done(trial)
            return trial
        self.progress.trial_started(index, self._planned(), role, self._text(role, config), self.elapsed(),
                                    self.opts.budget_s)
        trial_dir = os.path.join(self.out_dir, "trials", f"{index:02d}-{role}")
        inject = {} if mode == MODE_OBSERVE else dict(config)
        try:
            run = run_trial(self.script, self.argv, trial_dir, self.host,
                            self._trial_options(overrides or {}, timeout_s), mode=mode, inject=inject,
                            target=target, on_poll=self._tick)
        except TrialInterrupted as stop:
            if stop.run is not None:
                self.trials.append(trial_from_run(index, role, config or {}, stop.run))
            raise
        trial = dataclasses.replace(trial_from_run(index, role, config, run), config_text=self._text(role, config))
        self.trials.append(trial)
        self.progress.trial_done(trial)
        return trial

    def _resumed(self, role: str, config: Dict[str, Any]) -> Optional[Trial]:
        """The earlier measurement of this trial, when resuming (taken once)."""
        for i, t in enumerate(self._replay):
            same = role == "baseline" if t.role == "baseline" else (
                t.role == role and self.space is not None and self.space.key(t.config) == self.space.key(config))
            if same:
                return self._replay.pop(i)
        return None

    def describe(self, config: Dict[str, Any]) -> str:
        """A config in words (before the baseline found the loader: the script's own)."""
        return self.space.describe(config) if self.space is not None else "the script's own settings"

    def _text(self, role: str, config: Dict[str, Any]) -> str:
        return "one cached batch replayed" if role == "ceiling" else self.describe(config)

    def _typical_trial_s(self, proposal: Optional[Proposal] = None) -> float:
        """What a trial costs, from the median of the successful ones so far (a
        timed-out trial says nothing about the next one)."""
        ok = sorted(t.duration_s for t in self.trials if t.state == "ok" and t.duration_s)
        typical = ok[len(ok) // 2] if ok else 0.0
        if proposal is not None and proposal.overrides.get("min_window_batches") and self.loader is not None:
            best = max((t for t in self.trials if t.state == "ok" and t.batches_per_s), default=None,
                       key=lambda t: t.batches_per_s)
            if best is not None:  # a longer window: the extra batches at the best rate so far
                typical += proposal.overrides["min_window_batches"] / best.batches_per_s
        return typical

    def _planned(self) -> Optional[int]:
        """A rough 'of n' for the progress line: trials the budget still allows."""
        per = self._typical_trial_s()
        if not per:
            return None
        return len(self.trials) + 1 + max(0, math.floor((self.remaining() - per) / per))

    def _reject(self, proposal: Proposal, reason: str) -> Trial:
        trial = Trial(index=len(self.trials), role=proposal.role, config=dict(proposal.config),
                      state="rejected", reason=reason, config_text=self._text(proposal.role, proposal.config))
        self.trials.append(trial)
        self.progress.trial_done(trial)
        return trial

    # -- the tune -------------------------------------------------------------

    def run(self) -> TuneResult:
        try:
            return self._run_tune()
        except (TrialInterrupted, KeyboardInterrupt):
            # Ctrl-C or SIGTERM, during a trial (the runner has reaped it and
            # _run kept what it measured) or between trials: keep every trial.
            with deferred_signals():
                result = self.save(False, "interrupted: the tune was stopped before it finished "
                                          "(feedprof tune --resume DIR goes on from here)")
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
        if not preload or not self.opts.fork_trials:
            return
        try:
            self.zygote = Zygote(preload)
        except (ZygoteError, OSError) as exc:
            self.notes.append(f"trials ran cold: the fork server did not start ({exc})")

    def _run_tune(self) -> TuneResult:
        o = self.opts
        self.progress.header([
            f"feedprof tune: {os.path.relpath(self.script)} — budget {o.budget_s:.0f} s, "
            f"{self.cpu_cap} usable CPU(s), {self.host.gpu_status.removeprefix('GPU: ') or 'GPU ok'}",
            f"  results: {os.path.relpath(self.results_path)} (rewritten after every trial)"])
        self.progress.table_header()
        target = {"site": o.loader_site} if o.loader_site else None
        baseline = self._run("baseline", MODE_OBSERVE, {},
                             timeout_s=o.trial_timeout_s or max(60.0, o.budget_s), target=target)
        run = baseline.run
        rec = training_loader(run) if run is not None else None
        if baseline.state != "ok" or rec is None or not baseline.batches_per_s:
            why = baseline.reason or "no steady-state batches were measured"
            if rec is None and baseline.state == "ok":
                why = "the script never iterated a DataLoader"
            raise TuneError(f"the script with its own settings: {why}",
                            self.save(False, f"stopped: the baseline trial did not measure ({why})"))
        if o.loader_site and not site_matches(o.loader_site, rec.call_chain):
            seen = ", ".join(sorted({r.site for r in run.loaders if r.site})) or "none"
            raise TuneError(f"no data loader was built at --loader {o.loader_site} (loaders seen: {seen})",
                            self.save(False, f"stopped: no loader at {o.loader_site}"), exit_code=2)
        self.loader = rec
        max_w = o.max_workers or default_max_workers(self.cpu_cap)
        self.space = make_space(rec.framework, rec.config, self.cpu_cap, max_w, run.cuda_used)
        self.trials[0] = dataclasses.replace(baseline, config=self.space.legalize(dict(rec.config)),
                                             config_text=self.space.describe(rec.config))
        baseline = self.trials[0]
        self.memory.learn(baseline, self.space.workers(baseline.config), self.space.in_flight(baseline.config))
        self._start_zygote(run.modules)
        self.strategy = LadderStrategy(self.space, tol=o.tolerance, cpus_online=self.host.cpus_online)
        self.strategy.tell(baseline)
        bpe = f", {rec.batches_per_epoch} batches/epoch" if rec.batches_per_epoch else ""
        self.progress.message(f"  training loader: {rec.site or rec.name} ({rec.framework}, batch size "
                              f"{rec.batch_size or '?'}{bpe}); the script's own settings: "
                              f"{self.space.describe(rec.config)}")
        self.save()
        target = {"chain": list(rec.call_chain), "framework": rec.framework}
        trial_timeout = o.trial_timeout_s or max(30.0, 4 * baseline.duration_s)
        stop_reason, complete = "", True
        while True:
            proposal = self.strategy.ask()
            if proposal is None:
                break
            if self.remaining() < 0.8 * self._typical_trial_s(proposal):
                stop_reason = (f"the {o.budget_s:.0f} s budget cut the search short before "
                               f"{'the ceiling' if proposal.role == 'ceiling' else self.space.describe(proposal.config)}"
                               f" (a longer --budget may find more)")
                complete = False
                break
            workers = self.space.workers(proposal.config)
            reason = self.memory.check(workers, self.space.in_flight(proposal.config)) \
                if proposal.role != "ceiling" else None
            if reason:
                self.strategy.tell(self._reject(proposal, reason))
                self.save()
                continue
            mode = MODE_CEILING if proposal.role == "ceiling" else MODE_INJECT
            overrides = dict(proposal.overrides)
            if "min_window_batches" in overrides:  # e.g. persistent_workers: span epoch boundaries
                overrides["window_batches"] = max(o.window_batches, overrides["min_window_batches"])
                overrides["window_seconds"] = max(o.window_seconds, 3 * o.window_seconds)
            trial = self._run(proposal.role, mode, proposal.config, overrides=overrides,
                              timeout_s=min(trial_timeout, max(10.0, self.remaining() + 10)), target=target)
            self.strategy.tell(trial)
            if trial.state == "ok" and proposal.role != "ceiling":
                self.memory.learn(trial, workers, self.space.in_flight(proposal.config))
            if trial.state == "failed" and proposal.role == "ceiling":
                self.notes.append(f"the compute-ceiling trial failed ({trial.reason}); "
                                  "figures are reported against the baseline only")
            self.save()
        self.progress.done()
        return self.save(complete, stop_reason)


def tune(script: str, argv: Sequence[str] = (), out_dir: str = "feedprof-out",
         options: Optional[TuneOptions] = None, progress: bool = True, **kwargs: Any) -> TuneResult:
    """Tune the loader of an unmodified script; returns the TuneResult (also in
    ``out_dir/results.json``). Keyword arguments set TuneOptions fields, e.g.
    ``feedprof.tune("train.py", budget_s=60, max_workers=8)``."""
    import sys

    opts = dataclasses.replace(options or TuneOptions(), **kwargs)
    os.makedirs(out_dir, exist_ok=True)
    tuner = Tuner(script, argv, out_dir, opts)
    if progress:
        tuner.progress = ConsoleProgress(sys.stderr, describe=tuner.describe)
    from feedprof.render.html import write_report

    try:
        result = tuner.run()
    except TuneInterrupted as stop:  # the partial result is on the exception, and in the report
        write_report(stop.result, os.path.join(out_dir, "report.html"))
        raise
    write_report(result, os.path.join(out_dir, "report.html"))
    if progress:
        print(format_recommendation(result.recommendation, result), file=sys.stderr)
    return result
