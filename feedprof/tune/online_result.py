"""An online tune's results.json: every config the real run explored is a
trial whose figures come from its windows; the compute ceiling is the step
time when data is ready (a figure of the recommendation: no trial replays a
batch); the recommendation and its paste line are made as an offline tune
makes them (analyse/recommend.py, the space's paste)."""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

from feedprof.analyse.diagnose import classify
from feedprof.analyse.evidence import ConfigEvidence, config_key
from feedprof.analyse.measured import trial_from_run
from feedprof.analyse.recommend import recommend
from feedprof.store.reasons import (BaselineFigures, KilledBySignal, NothingTried, OutOfMemoryKilled, OverMemoryBudget,
                                    PersistentWorkersComputed,
                                    RandomDrawsMove, Reason, SamplesFollowWorkers, ScriptFailed, SharedMemoryExhausted,
                                    SwitchingStopped, TrialTimedOut)
from feedprof.store import (Framework, HostInfo, Outcome, Phase, Role, Run, RunKind, Summary, SwitchAt, Trial,
                            TrialState, TuneResult)
from feedprof.store.online import OnlineFailure, OnlineLoaderMode, OnlineRecord
from feedprof.tune.online_strategy import RunHistory, Limits, pick_tolerance, predicted_workers, workers

PHASE_OF_WHY = {"climb": Phase.LADDER, "refine": Phase.REFINE, "confirm": Phase.CONFIRM}


def _summary(e: Optional[ConfigEvidence], framework: str) -> Optional[Summary]:
    """A config's evidence from the run as a trial's summary, for analyse/recommend.py."""
    if e is None:
        return None
    per_batch = e.samples / max(1, e.batches)
    wait_fraction = e.wait_s / e.wall_s if e.wall_s else None
    n = workers(e.config)
    return Summary(framework=framework, batches_measured=e.batches, measured_s=e.wall_s,
                   batches_per_s=e.steady_rate, batches_per_s_low=min(e.rates), batches_per_s_high=max(e.rates),
                   n_chunks=len(e.rates), effective_batches_per_s=e.rate, epoch_startup_s=e.startup_s,
                   batch_size=round(per_batch) or None, samples_per_s=e.rate * per_batch if e.rate else None,
                   data_wait_fraction=wait_fraction, data_wait_s=e.wait_s, input_bound=classify(wait_fraction),
                   num_workers=n, workers_cpu_pct=100 * e.workers_cores if e.workers_cores is not None and n else None)


def _failure_cause(f: OnlineFailure) -> Reason:
    import signal

    if f.kind == "hung":
        return TrialTimedOut(limit_s=0.0)
    if f.kind == "memory":
        return OverMemoryBudget(need_bytes=f.taken_bytes or 0, free_bytes=f.budget_bytes or 0)
    if signal.SIGBUS in f.signals or "Bus error" in f.error:
        return SharedMemoryExhausted(signal="SIGBUS", workers=workers(f.config))
    if signal.SIGKILL in f.signals or "Killed" in f.error:
        return OutOfMemoryKilled(signal="SIGKILL", workers=workers(f.config))
    names = [signal.Signals(n).name for n in f.signals if n in signal.Signals._value2member_map_]
    return KilledBySignal(signal=", ".join(names) or "unknown")


def _outcome(failure: Optional[OnlineFailure]) -> Outcome:
    if failure is None:
        return Outcome(state=TrialState.OK)
    if failure.kind == "error":  # an error raised in a worker (not by the script's own settings: it went on)
        return Outcome(state=TrialState.FAILED, cause=ScriptFailed(error=failure.error))
    state = TrialState.TIMEOUT if failure.kind == "hung" else TrialState.KILLED
    return Outcome(state=state, cause=_failure_cause(failure))


def _config_run(h: RunHistory, config: Dict[str, Any], framework: str) -> Run:
    failure = next((f for f in h.failures if config_key(f.config) == config_key(config)), None)
    outcome = _outcome(failure)
    ws = h.of(config)
    return Run(kind=RunKind.TRIAL, outcome=outcome, summary=_summary(h.about(config), framework),
               duration_s=sum(w.wall_s for w in ws))


def _configs_in_order(h: RunHistory, switch_configs: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    seen: Dict[str, Dict[str, Any]] = {}
    for c in [h.baseline or {}, *switch_configs, *(w.config for w in h.windows), *(f.config for f in h.failures)]:
        if c:
            seen.setdefault(config_key(c), c)
    return [c for c in seen.values() if h.of(c) or h.failed(c)]


def _trials(h: RunHistory, decider: Any, space: Any) -> List[Trial]:
    whys = {config_key(s.config): s.why for s in reversed(decider.switches)}
    trials: List[Trial] = []
    for config in _configs_in_order(h, [s.config for s in decider.switches]):
        base = config_key(config) == config_key(h.baseline or {})
        role = Role.BASELINE if base else Role.SEARCH
        phase = Phase.BASELINE if base else PHASE_OF_WHY.get(whys.get(config_key(config), ""), Phase.SEARCH)
        trials.append(trial_from_run(len(trials), role, config, _config_run(h, config, decider.framework), phase=phase,
                                     config_text=space.describe(config)))
    return trials  # (no ceiling trial: no batch is replayed in a real run; recommend() is given its figure)


def _settled(trials: List[Trial], decider: Any) -> List[Trial]:
    """What the recommendation is made from: once the search settled, the config the run kept
    (measured over the rest of the run) against the baseline, and whatever broke (its hazards);
    before that, every config measured, by the online pick's own rule."""
    if not decider.final or decider.current is None or decider.held_why:  # (held: what it kept was not chosen)
        return trials
    kept = config_key(decider.current)
    return [t for t in trials if config_key(t.config) == kept or t.role == Role.BASELINE or t.state != TrialState.OK]


def _caveats(decider: Any, limits: Limits, space: Any) -> List[Reason]:
    """Why the advice is not simply the search's: the tuned loader's switch moves draws from the
    script's random streams in its own process (not switched: the advice is what the windows of its
    own settings predict; or switched with --allow-rng-change), its workers' augmentation moved
    with the worker count, or its switching stopped (a failed check, persistent workers past their
    first epoch) before the search settled."""
    out: List[Reason] = []
    seen = sorted((r for r in decider.randomness.values() if r.target), key=lambda r: r.t_s)
    main = [r for r in seen if r.where != "rng_workers"]
    if main:
        held = not main[0].allowed
        out.append(RandomDrawsMove(where=main[0].where, streams=main[0].streams, held=held,
                                   moved=any(r.moved_at_s is not None for r in main),
                                   predicted_workers=predicted_workers(decider.history, limits, space) if held else None))
    out += [RandomDrawsMove(where=r.where, streams=r.streams, held=False, moved=True)
            for r in seen if r.where == "rng_workers"][:1]
    held = next((h for h in decider.holds if h.target and h.why == decider.held_why), None)
    if held is not None and not main:  # (a hold after the search settled changed nothing it chose)
        out.append(SwitchingStopped(why=held.why, detail=held.detail,
                                    predicted_workers=predicted_workers(decider.history, limits, space)))
    return out


def _persistent(rec: Any, h: RunHistory, space: Any) -> Any:
    """The run's own pools outlived its epochs (frameworks/torch_carry.py: the dataset unchanged
    between them), so its figures are persistent workers': the advice says so, with what they save."""
    config = rec.config
    if "persistent_workers" not in config or config["persistent_workers"] or not workers(config):
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


def _untuned(run: Optional[Run], decider: Any) -> Tuple[OnlineLoaderMode, ...]:
    """The run's busiest loader, when online tuning could not reach it and no event said why
    (a loader pulled inside a framework's runtime, as fit pulls a tf.data pipeline)."""
    if run is None or decider.history.baseline is not None:
        return ()
    runs = run.ranks or (run,)
    busiest = max((rec for r in runs[:1] for rec in r.loaders), key=lambda rec: rec.batches, default=None)
    if busiest is None or any(m.loader_id == busiest.loader_id for m in decider.loaders):
        return ()
    return (OnlineLoaderMode(loader_id=busiest.loader_id, mode="none", why_not=f"framework:{busiest.framework}"),)


def _sharding(decider: Any, loader: Any) -> Tuple[Reason, ...]:
    """An IterableDataset switched between epochs: its samples followed the worker count, as the advice's will."""
    if decider.switch_at != SwitchAt.EPOCH:
        return ()
    changed = any(workers(s.config) != workers(decider.history.baseline or {}) for s in decider.switches)
    return (SamplesFollowWorkers(dataset=loader.dataset if loader is not None else "", switched=changed),)


def _target_loader(run: Optional[Run]) -> Any:
    if run is None:
        return None
    runs = run.ranks or (run,)
    loaders = [rec for r in runs[:1] for rec in r.loaders]
    return max(loaders, key=lambda r: r.batches_per_epoch or 0, default=None)


def _spread(windows: Sequence[Any], run: Optional[Run]) -> tuple:
    """Window by window, which rank holds the job back (analyse/stragglers.py), for a job of ranks."""
    from feedprof.analyse.stragglers import rank_spread, waits_of_online

    nodes = {r.rank.rank: r.rank.node for r in (run.ranks if run is not None else ()) if r.rank is not None}
    spread = rank_spread(waits_of_online(windows, nodes))
    return (spread,) if spread is not None else ()


def online_result(script: str, argv: Sequence[str], host: HostInfo, started_at: str, duration_s: float,
                  run: Optional[Run], decider: Any, launch: Any, complete: bool) -> TuneResult:
    from feedprof.record.host import usable_cpu_count
    from feedprof.frameworks.paste import with_launch
    from feedprof.tune.space import make_space

    h = decider.history
    cpu_cap = max(1, min(decider.rank_cpus.values()) if decider.rank_cpus else usable_cpu_count() // decider.ranks())
    rec, trials, loader = None, [], _target_loader(run)
    if h.baseline is not None:
        space = make_space(decider.framework, dict(h.baseline), cpu_cap, decider.limits.max_workers,
                           run.cuda_used if run is not None else None)
        trials = _trials(h, decider, space)
        caveats = _caveats(decider, Limits(cpu_cap=cpu_cap, max_workers=decider.limits.max_workers), space)
        rec = recommend(_settled(trials, decider), space, tol=pick_tolerance(h), cpu_cap=cpu_cap,
                        nothing_tried=NothingTried() if decider.held_why else None,  # (replaced by the caveats)
                        ceiling_batches_per_s=h.ceiling())  # (the step time when data is ready)
        if rec is not None and h.pools_carried:
            rec = _persistent(rec, h, space)
        if rec is not None and caveats:
            rec = dataclasses.replace(rec, reasons=_with_caveats(rec.reasons, caveats))
        if rec is not None:
            rank_argv = next((r.argv for r in (run.ranks if run is not None else ()) if r.argv), ())
            paste = space.paste(rec.config, loader, script, list(rank_argv or argv))
            line = with_launch(paste.line, script, launch.command) if launch else paste.line
            rec = dataclasses.replace(rec, config_text=space.describe(rec.config), paste_line=line,
                                      loader_site=loader.site if loader else "",
                                      reasons=rec.reasons + tuple(paste.findings) + tuple(space.notes())
                                      + _spread(h.windows, run) + _sharding(decider, loader))
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
                      trials=tuple(trials), launch=tuple(launch.command) if launch else (), online=online,
                      run=dataclasses.replace(run, kind=RunKind.ONLINE) if run is not None else None)
