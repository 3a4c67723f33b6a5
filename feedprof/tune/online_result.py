"""An online tune's results.json: every config the real run explored, as its evidence from the
run's windows (store/evidence.py, the shape an offline tune's trials give too); the compute
ceiling is the step time when data is ready (no batch is replayed in a real run); the
recommendation is made by the offline tune's rules from the same evidence (analyse/recommend.py,
through RunMeasurements), its paste line by the space's paste."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from feedprof.store.knobs.threads import threads_apart
from feedprof.analyse import rules
from feedprof.analyse.batch_time import windows_batch_time, windows_step_alone
from feedprof.analyse.diagnose import workers_of
from feedprof.analyse.evidence import config_key
from feedprof.analyse.loading import training_loading
from feedprof.analyse.measurements import Baseline, CpuUse
from feedprof.analyse.recommend import recommend_from
from feedprof.analyse.stragglers import nodes_differ, rank_spread, waits_of_online
from feedprof.frameworks.paste import with_launch
from feedprof.record.host import usable_cpu_count
from feedprof.store import (BatchTime, ConfigEvidence, Framework, VerdictKind, HostInfo, LoaderRecord, LoadingProfile, Outcome,
                            Recommendation, Run, RunKind, SwitchAt, TrialState, TuneResult)
from feedprof.store.online import OnlineFailure, OnlineLoaderMode, OnlineRecord, OnlineWindow
from feedprof.store.reasons import (BaselineFigures, PoolsHeldOnline, KilledBySignal, NothingTried, OutOfMemoryKilled, OverMemoryBudget,
                                    PersistentWorkersComputed, RandomDrawsMove, Reason, SamplesFollowWorkers,
                                    ScriptFailed, SharedMemoryExhausted, SwitchingStopped, TrialTimedOut,
                                    Verdict, WorkersCapped)
from feedprof.trial.launch import Launch
from feedprof.tune.online_strategy import RunEvidence, RunHistory
from feedprof.tune.ray_advice import ray_advice
from feedprof.tune.search import pick_tolerance, predicted_count
from feedprof.tune.space import Space
from feedprof.tune.spaces import make_space

if TYPE_CHECKING:
    from feedprof.tune.online import Decider  # (it makes this result: imported for its type only)


def _failure_cause(f: OnlineFailure) -> Reason:
    import signal

    if f.kind == "hung":
        return TrialTimedOut(limit_s=0.0)
    if f.kind == "memory":
        return OverMemoryBudget(need_bytes=f.taken_bytes or 0, free_bytes=f.budget_bytes or 0)
    if signal.SIGBUS in f.signals or "Bus error" in f.error:
        return SharedMemoryExhausted(signal="SIGBUS", workers=workers_of(f.config) or 0)
    if signal.SIGKILL in f.signals or "Killed" in f.error:
        return OutOfMemoryKilled(signal="SIGKILL", workers=workers_of(f.config) or 0)
    names = [signal.Signals(n).name for n in f.signals if n in signal.Signals._value2member_map_]
    return KilledBySignal(signal=", ".join(names) or "unknown")


def _outcome(failure: Optional[OnlineFailure]) -> Outcome:
    if failure is None:
        return Outcome(state=TrialState.OK)
    if failure.kind == "error":  # an error raised in a worker (not by the script's own settings: it went on)
        return Outcome(state=TrialState.FAILED, cause=ScriptFailed(error=failure.error))
    state = TrialState.TIMEOUT if failure.kind == "hung" else TrialState.KILLED
    return Outcome(state=state, cause=_failure_cause(failure))


def _configs_in_order(h: RunHistory, switch_configs: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Every config the run measured or saw fail: the baseline first, then as the run came to them."""
    seen: Dict[tuple, Dict[str, Any]] = {}
    for c in [h.baseline or {}, *switch_configs, *(w.config for w in h.windows), *(f.config for f in h.failures)]:
        if c:
            seen.setdefault(config_key(c), c)
    return [c for c in seen.values() if h.windows_of(c) or h.failed(c)]


class RunMeasurements:
    """The real run's windows and failures as recommend() reads them (analyse/recommend.py
    Measurements; an offline tune's are analyse/from_trials.py's). Once the search settled, the
    config the run kept (measured over the rest of the run) is judged against the script's own
    settings alone; before that, every config measured, by the online pick's own rule."""

    def __init__(self, decider: "Decider", space: Space, run: Optional[Run] = None):
        h = self.history = decider.history
        self.space, self.run = space, run
        self.every_config = configs = _configs_in_order(h, [s.config for s in decider.switches])
        if decider.final and decider.current is not None and not decider.held_why:  # (held: it was not chosen)
            kept = {config_key(decider.current), config_key(h.baseline or {})}
            configs = [c for c in configs if config_key(c) in kept or h.failed(c)]
        self.all_configs = configs
        self.cap = self._cap()
        base = h.about(h.baseline) if h.baseline else None
        failure = next((f for f in h.failures if h.baseline and config_key(f.config) == config_key(h.baseline)), None)
        outcome = _outcome(failure)
        self.baseline = None if base is None and failure is None else Baseline(
            config=dict(h.baseline or {}), state=outcome.state, cause=outcome.cause,
            wait_fraction=base.wait_s / base.wall_s if base is not None and base.wall_s else None)
        self.ceiling = h.ceiling()  # the step time when data is ready: no batch is replayed in a real run

    def _cap(self) -> Optional[WorkersCapped]:
        """The failure that caps the worker count, as the search capped it (RunHistory.capping_failure)."""
        f = self.history.capping_failure()
        if f is None:
            return None
        outcome = _outcome(f)
        return WorkersCapped(max_workers=(workers_of(f.config) or 0) - 1, config=dict(f.config),
                             state=outcome.state.value, because=outcome.cause)

    def configs(self) -> List[ConfigEvidence]:
        found = [self.history.about(c) for c in self.all_configs if not self.history.failed(c)]
        return [e for e in found if e is not None
                and (self.cap is None or (workers_of(e.config) or 0) <= self.cap.max_workers)]

    def evidence(self) -> Tuple[ConfigEvidence, ...]:
        """Every config the run measured or saw fail, for results.json: one that failed before its
        first window as a failure with no measurement."""
        return tuple(self.history.about(c) or ConfigEvidence(config=dict(c), rate=None, rates=(), measurements=0,
                                                             failed=True, source="run")
                     for c in self.every_config)

    def tried_a_setting(self) -> bool:
        return any(config_key(c) != config_key(self.history.baseline or {}) for c in self.all_configs)

    def cheaper_within_noise(self, chosen: ConfigEvidence, cost: Callable[[Dict[str, Any]], tuple]) -> None:
        return None  # (the online pick's tolerance is already this run's noise: rules.pick_tolerance)

    def finalize(self, chosen: ConfigEvidence, tol: float) -> Tuple[Dict[str, Any], List[Reason]]:
        return self.space.legalize(dict(chosen.config)), []  # (persistent workers: _persistent, from the run)

    def repeats(self, chosen: ConfigEvidence) -> int:
        return 1  # (one stretch of the run, however many windows)

    def cpu(self, chosen: ConfigEvidence) -> Tuple[Optional[bool], Optional[CpuUse]]:
        """The space's CPU rule on the windows' workers' CPU (the run's windows read no main-process
        share: thread workers are not judged)."""
        if chosen.workers_cores is None:
            return None, None
        use = CpuUse(workers_cores=chosen.workers_cores)
        return self.space.cpu_verdict(chosen.config, use), use

    def memory_saved_bytes(self, chosen: ConfigEvidence) -> None:
        return None  # (the run's memory is one curve: the report shows it)

    def trainer_advice(self, verdict: Verdict) -> None:
        return None

    def hazards(self, chosen: ConfigEvidence, config: Dict[str, Any], ram_budget_bytes: Optional[int]) -> List[Reason]:
        return []  # (what broke in the run capped the search: its failures are the cap's)

    def batch_times(self, chosen: ConfigEvidence) -> Tuple[BatchTime, ...]:
        """From the run's windows; the step alone from its windows with no workers (no batch is
        replayed in a real run)."""
        base = self.history.baseline or {}
        alone = windows_step_alone(self.history.windows_of(base)) if base and not workers_of(base) else None
        times = [windows_batch_time(self.history.windows_of(base), base, "script", alone) if base else None]
        if config_key(chosen.config) != config_key(base):
            times.append(windows_batch_time(self.history.windows_of(chosen.config), chosen.config, "pick", alone))
        return tuple(t for t in times if t is not None)

    def loading(self, chosen: ConfigEvidence) -> Optional[LoadingProfile]:
        return training_loading(self.run)  # (the whole run's: every config it ran)


def _caveats(decider: "Decider", run_evidence: RunEvidence) -> List[Reason]:
    """Why the advice is not simply the search's: the tuned loader's switch moves draws from the
    script's random streams in its own process (not switched: the advice is what the windows of its
    own settings predict; or switched with --allow-rng-change), its workers' augmentation moved
    with the worker count, or its switching stopped (a failed check, persistent workers past their
    first epoch) before the search settled."""
    predicted = predicted_count(run_evidence, rules.ONLINE)
    out: List[Reason] = []
    seen = sorted((r for r in decider.randomness.values() if r.target), key=lambda r: r.t_s)
    main = [r for r in seen if r.where != "rng_workers"]
    if main:
        held = not main[0].allowed
        out.append(RandomDrawsMove(where=main[0].where, streams=main[0].streams, held=held,
                                   moved=any(r.moved_at_s is not None for r in main),
                                   predicted_workers=predicted if held else None))
    out += [RandomDrawsMove(where=r.where, streams=r.streams, held=False, moved=True)
            for r in seen if r.where == "rng_workers"][:1]
    held = next((h for h in decider.holds if h.target and h.why == decider.held_why), None)
    if held is not None and not main:  # (a hold after the search settled changed nothing it chose)
        out.append(SwitchingStopped(why=held.why, detail=held.detail,
                                    predicted_workers=predicted))
    return out


def _predicted(rec: Recommendation, caveats: List[Reason], space: Space) -> Recommendation:
    """A loader held before any other setting was tried (a switch would move the script's random
    draws) is advised the count its own settings' wait predicts, marked predicted: its rates are
    not measured, so none are given; the caveat says why it was not tried and the flag that lets it."""
    held = next((c for c in caveats if isinstance(c, RandomDrawsMove) and c.held and c.predicted_workers), None)
    if held is None or getattr(rec.verdict, "kind", None) != VerdictKind.NOTHING_TRIED or not rec.baseline_config:
        return rec
    config = space.with_primary(dict(rec.baseline_config), held.predicted_workers or 0)
    verdict = dataclasses.replace(rec.verdict, kind=VerdictKind.PREDICTED, config=dict(config), speedup=None,
                                  fraction_of_ceiling=None)
    return dataclasses.replace(rec, config=config, verdict=verdict, predicted=True, batches_per_s=None,
                               samples_per_s=None, training_batches_per_s=None, speedup=None,
                               fraction_of_ceiling=None, trial_index=None)


def _persistent(rec: Recommendation, h: RunHistory, space: Space) -> Recommendation:
    """The run's own pools outlived its epochs (frameworks/torch_carry.py: the dataset unchanged
    between them), so its figures are persistent workers': the advice says so, with what they save."""
    config = rec.config
    if "persistent_workers" not in config or config["persistent_workers"] or not workers_of(config):
        return rec
    steady, startup_s = h.steady_rate(config), h.epoch_cost_s(config)
    if not steady or startup_s is None or not h.batches_per_epoch:
        return rec
    epoch_s = startup_s + h.batches_per_epoch / steady
    judged = PersistentWorkersComputed(startup_s=startup_s, gain=startup_s / epoch_s, epoch_s=epoch_s, in_run=True)
    return dataclasses.replace(rec, config=space.legalize({**config, "persistent_workers": True}),
                               reasons=rec.reasons + (judged,))


def _with_caveats(reasons: Tuple[Reason, ...], caveats: List[Reason]) -> Tuple[Reason, ...]:
    """The caveats in place of "nothing was tried" (they say why), else after the baseline's figures."""
    rest = [r for r in reasons if not isinstance(r, NothingTried)]
    at = next((i + 1 for i, r in enumerate(rest) if isinstance(r, BaselineFigures)), 0)
    return tuple(rest[:at] + caveats + rest[at:])


def _untuned(run: Optional[Run], decider: "Decider") -> Tuple[OnlineLoaderMode, ...]:
    """The run's busiest loader, when online tuning could not reach it and no event said why
    (a loader pulled inside a framework's runtime, as fit pulls a tf.data pipeline)."""
    if run is None or decider.history.baseline is not None:
        return ()
    runs = run.ranks or (run,)
    busiest = max((rec for r in runs[:1] for rec in r.loaders), key=lambda rec: rec.batches, default=None)
    if busiest is None or any(m.loader_id == busiest.loader_id for m in decider.loaders):
        return ()
    return (OnlineLoaderMode(loader_id=busiest.loader_id, mode="none", why_not=f"framework:{busiest.framework}"),)


def _sharding(decider: "Decider", loader: Optional[LoaderRecord]) -> Tuple[Reason, ...]:
    """An IterableDataset switched between epochs: its samples followed the worker count, as the advice's will."""
    if decider.switch_at != SwitchAt.EPOCH:
        return ()
    changed = any(workers_of(s.config) != workers_of(decider.history.baseline or {}) for s in decider.switches)
    return (SamplesFollowWorkers(dataset=loader.dataset if loader is not None else "", switched=changed),)


def _pools_held(decider: "Decider") -> Tuple[Reason, ...]:
    """The run's workers had their thread pools held for a while: said with what that can change."""
    held = sorted({int(s.config["worker_threads"]) for s in decider.switches if s.config.get("worker_threads")})
    return (PoolsHeldOnline(threads=held[0]),) if held else ()


def _target_loader(run: Optional[Run]) -> Optional[LoaderRecord]:
    if run is None:
        return None
    runs = run.ranks or (run,)
    loaders = [rec for r in runs[:1] for rec in r.loaders]
    return max(loaders, key=lambda r: r.batches_per_epoch or 0, default=None)


def _spread(windows: Sequence[OnlineWindow], run: Optional[Run]) -> Tuple[Reason, ...]:
    """Window by window, which rank holds the job back (analyse/stragglers.py), for a job of ranks."""
    nodes = {r.rank.rank: r.rank.node for r in (run.ranks if run is not None else ()) if r.rank is not None}
    found = (rank_spread(waits_of_online(windows, nodes)), nodes_differ(run) if run is not None else None)
    return tuple(n for n in found if n is not None)


def online_result(script: str, argv: Sequence[str], host: HostInfo, started_at: str, duration_s: float,
                  run: Optional[Run], decider: "Decider", launch: Optional[Launch], complete: bool) -> TuneResult:
    h = decider.history
    limits = decider.rank_limits()  # (the CPUs each rank may use: what the search decided by)
    cpu_cap = limits.cpu_cap
    rec, evidence, loader = None, (), _target_loader(run)
    if h.baseline is not None:
        space = make_space(decider.framework, dict(h.baseline), cpu_cap, limits.max_workers,
                           run.cuda_used if run is not None else None)
        measurements = RunMeasurements(decider, space, run)
        evidence = measurements.evidence()
        run_evidence = RunEvidence(h, limits, space)
        caveats = _caveats(decider, run_evidence)
        rec = recommend_from(measurements, space, tol=pick_tolerance(run_evidence, rules.ONLINE), cpu_cap=cpu_cap,
                             nothing_tried=NothingTried() if decider.held_why else None)  # (replaced by the caveats)
        if rec is not None and h.pools_carried:
            rec = _persistent(rec, h, space)
        if rec is not None and caveats:
            rec = _predicted(dataclasses.replace(rec, reasons=_with_caveats(rec.reasons, caveats)), caveats, space)
        if rec is not None:
            rank_argv = next((r.argv for r in (run.ranks if run is not None else ()) if r.argv), ())
            paste = space.paste(rec.config, loader, script, list(rank_argv or argv))
            line = with_launch(paste.line, script, launch.command) if launch else paste.line
            ray, reserve = ray_advice(run.ranks if run is not None else (), rec, script, usable_cpu_count(), cpu_cap,
                                      ())
            rec = dataclasses.replace(rec, config_text=space.describe(rec.config), **threads_apart(rec.config),
                                      paste_line="\n".join(t for t in (line, reserve) if t),
                                      loader_site=loader.site if loader else "",
                                      reasons=rec.reasons + tuple(paste.findings) + tuple(space.notes())
                                      + _spread(h.windows, run) + _sharding(decider, loader) + ((ray,) if ray else ())
                                      + _pools_held(decider))
    exit_code = run.outcome.exit_code if run is not None else None
    modes = tuple(decider.loaders) + _untuned(run, decider)
    online = OnlineRecord(explore_budget_s=decider.opts.explore_s, explored_s=decider.explored_s(),
                          settled_at_s=decider.settled_at_s, settled_config=dict(decider.current or {}),
                          windows=tuple(h.windows), switches=tuple(decider.switches), failures=tuple(h.failures),
                          warmups=tuple(h.warmups),
                          loaders=modes,
                          workers_changed=any(config_key(s.config) != config_key(h.baseline or {})
                                              for s in decider.switches), switch_at=decider.switch_at,
                          exit_code=exit_code, target_loader_id=decider.target_loader_id,
                          order_checks=tuple(decider.order_checks),
                          randomness=tuple(decider.randomness.values()), holds=tuple(decider.holds),
                          carries=tuple(decider.carries))
    framework = decider.framework if h.baseline is not None else Framework.NONE
    return TuneResult(script=script, argv=tuple(argv), framework=framework,
                      loader_site=loader.site if loader else "", started_at=started_at, duration_s=duration_s,
                      budget_s=decider.opts.explore_s, complete=complete, host=host, recommendation=rec,
                      evidence=evidence,
                      launch=tuple(launch.command) if launch else (), online=online,
                      run=dataclasses.replace(run, kind=RunKind.ONLINE) if run is not None else None)
