"""``feedprof tune --online``: tune inside the real run, the parent's side.

NOTE [ Online tuning, the parent's side ]  (trial/online_child.py is the script's)

    OnlineTuner.run ─► trial.runner.run_trial / jobrunner.run_job (Mode.ONLINE, full run,
                       the script's output on the terminal, no time limit)
      on every poll ─► Decider.poll: new events of every rank ─► RunHistory
                       ─► online_strategy.decide ─► decision.json (atomic, one seq per change)
      the job ends (or Ctrl-C) ─► online_result.result(): a trial per config explored,
                       the recommendation, the timeline ─► results.json
    feedprof's exit status is the job's own.
"""
from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from feedprof import defaults
from feedprof.analyse import rules
from feedprof.store.codec import write_text_atomic
from feedprof.record.clock import MONOTONIC, Clock
from feedprof.store.online import (OnlineCarry, OnlineFailure, OnlineHold, OnlineLoaderMode, OnlineOrderCheck, OnlineRandomness,
                                   OnlineSwitch, OnlineWarmup, OnlineWindow)
from feedprof.trial.protocol import read_events
from feedprof.analyse.evidence import config_key
from feedprof.store.codes import Framework, SwitchAt
from feedprof.analyse.diagnose import workers_of
from feedprof.trial.protocol import DECISION_FILE
from feedprof.tune.online_memory import JobMemory
from feedprof.tune.online_strategy import Limits, RunEvidence, RunHistory, decide
from feedprof.tune.evidence import Next
from feedprof.tune.search import predicted_count, retreat
from feedprof.tune.space import Space
from feedprof.tune.spaces import make_space

_RANK = re.compile(r"events-(\d+)\.jsonl$")


@dataclass(frozen=True)
class OnlineOptions:
    explore_s: float = defaults.EXPLORE_S  # exploring stops after this long, measured from the first window
    explore_share: Optional[float] = None  # or: at most this share of the run so far (--explore 10%)
    window_seconds: float = 0.5
    min_window_batches: int = 3
    max_workers: Optional[int] = None
    max_memory_bytes: Optional[int] = None
    loader_site: Optional[str] = None
    interval_s: float = 0.2
    gpu: bool = True
    allow_rng_change: bool = False  # switch a loader even where that moves the script's random draws
    allow_resharding: bool = False  # --allow-resharding: an IterableDataset is switched between epochs


@dataclass
class Decider:
    """Reads every rank's events, keeps the RunHistory, writes decisions."""

    trial_dir: str
    limits: Limits
    opts: OnlineOptions
    clock: Clock = MONOTONIC
    origin_s: float = 0.0
    history: RunHistory = field(default_factory=RunHistory)
    switches: List[OnlineSwitch] = field(default_factory=list)
    loaders: List[OnlineLoaderMode] = field(default_factory=list)
    current: Optional[Dict[str, Any]] = None
    seq: int = 0
    final: bool = False
    settled_at_s: Optional[float] = None
    first_window_s: Optional[float] = None
    last_why: str = "baseline"
    publish: Optional[Callable[[Dict[str, Any]], None]] = None  # decisions in-process, instead of a file
    on_decision: Optional[Callable[[Next, float, str], None]] = None  # told each decision, its time, the framework
    memory: JobMemory = field(default_factory=JobMemory)  # the job's memory against its budget (online_memory.py)
    _broke_current: bool = False
    local_pids: Dict[int, int] = field(default_factory=dict)  # rank -> its process, where it runs on this node
    _offsets: Dict[str, int] = field(default_factory=dict)
    rank_cpus: Dict[int, int] = field(default_factory=dict)  # rank -> CPUs it may use, as it reported
    order_checks: List[OnlineOrderCheck] = field(default_factory=list)
    randomness: Dict[Tuple[int, int, str], OnlineRandomness] = field(default_factory=dict)  # (rank, loader, where)
    holds: List[OnlineHold] = field(default_factory=list)
    carries: List[OnlineCarry] = field(default_factory=list)
    held_why: str = ""  # the tuned loader stopped switching for this (the search settled on what it kept)
    target_loader_id: Optional[int] = None  # rank 0's tuned loader
    framework: str = Framework.TORCH  # the tuned loader's (its Space makes the configs tried)
    switch_at: str = SwitchAt.BATCH  # where the tuned loader switches (between epochs: an IterableDataset)
    space: Optional[Space] = None
    launcher: str = ""  # the job's launch command's (trial/launch.py): which ranks report here

    def poll(self) -> None:
        changed = self._read_events()
        if self.history.baseline is None:
            return
        if self._memory_over_budget():
            self._leave_for_memory()
        elif self._broke_current and self.final:  # the settled config broke: the best with fewer workers
            self._broke_current = False
            self._write(Next(self._retreat(self.current or {}), "retreat_failed", final=True))
        elif not self.final and (changed or self.explore_left_s() <= 0):  # (a silent config cannot hold it)
            self._decide()

    def _memory_over_budget(self) -> bool:
        """Has the job taken more memory than the budget (JobMemory)? Only a config with workers is
        left for it, once every rank here serves it (and once: a config left is on its way out)."""
        if self.current is None or not workers_of(self.current) or self.history.failed(self.current) \
                or not self._in_force(self.current):
            return False
        return self.memory.over_budget(config_key(self.current), self.clock.now_s(), self.local_pids.values())

    def _in_force(self, config: Dict[str, Any]) -> bool:
        """Has every rank on this node said it serves ``config`` (its last switch)? Until then the
        job's memory is partly the last config's, whose workers may still be ending."""
        key, last = config_key(config), {}
        for s in self.switches:
            last[s.rank] = config_key(s.config)
        ranks = set(self.local_pids) & set(last) or set(last)  # (a rank that never switches holds no other pool)
        return bool(last) and all(last[rank] == key for rank in ranks)

    def _leave_for_memory(self) -> None:
        """Leave the config in force before its memory breaks the run: a failure of that config,
        and the best measured config with fewer workers for the rest of the run."""
        failed = self.current or {}
        self.history.failures.append(OnlineFailure(rank=0, config=failed, kind="memory", error="memory over the budget",
                                                   t_s=self.clock.now_s() - self.origin_s,
                                                   taken_bytes=self.memory.taken_bytes,
                                                   budget_bytes=self.memory.budget_bytes))
        self._write(Next(self._retreat(failed), "retreat_memory", final=self.final))

    def _read_events(self) -> bool:
        changed = False
        for path in sorted(glob.glob(os.path.join(self.trial_dir, "events*.jsonl"))):
            m = _RANK.search(path)
            rank = int(m.group(1)) if m else 0
            events, self._offsets[path] = read_events(path, self._offsets.get(path, 0))
            for ev in events:
                changed = self._on_event(rank, ev) or changed
        return changed

    def _on_started(self, rank: int, ev: Dict[str, Any]) -> bool:
        from feedprof.trial.jobrunner import in_sight, ranks_to_wait_for  # (a job's: not loaded in the user's process)

        if ev.get("cpus"):
            self.rank_cpus[rank] = int(ev["cpus"])  # what that rank may use (its share of its node)
        if ev.get("pid") and in_sight(ev):  # (a PID names a process here only)
            self.local_pids[rank] = int(ev["pid"])
        # a config is measured once every rank reporting here has its windows (ranks on other nodes too)
        self.history.ranks_expected = max(self.history.ranks_expected, ranks_to_wait_for(ev, self.launcher))
        return False

    def _on_event(self, rank: int, ev: Dict[str, Any]) -> bool:
        kind = ev.get("event")
        if kind in ("online_order", "online_randomness", "online_hold", "online_epoch_end"):
            return self._on_check(rank, kind, ev)
        if kind == "started":
            return self._on_started(rank, ev)
        if kind == "online_window":
            w = OnlineWindow(rank=rank, config=ev["config"], batches=ev["batches"], samples=ev["samples"],
                             wait_s=ev["wait_s"], t_start_s=ev["t_start_s"], t_end_s=ev["t_end_s"],
                             workers_cpu_s=ev.get("workers_cpu_s"), load_cpu_s=ev.get("load_cpu_s", 0.0),
                             span_s=ev.get("span_s"), epoch=ev.get("epoch", 0), other_s=ev.get("other_s", 0.0),
                             pool_threads=ev.get("pool_threads"))
            self.history.windows.append(w)
            if self.first_window_s is None:
                self.first_window_s = w.t_start_s
            return True
        if kind == "online_switch":
            why = "recovered" if self._recovering(ev["config"]) else self.last_why
            self.switches.append(OnlineSwitch(rank=rank, t_s=ev["t_s"], config=ev["config"], why=why))
            return True
        if kind == "online_carry":
            carry = OnlineCarry(rank=rank, loader_id=ev["loader_id"], carried=bool(ev.get("carried")),
                                epoch=ev.get("epoch", 0), t_s=ev["t_s"], why=ev.get("why", ""),
                                target=bool(ev.get("target")))
            self.carries.append(carry)
            if carry.target:  # (a rank whose pools restart after all makes the job pay it: the slowest rank sets its pace)
                self.history.pools_carried = carry.carried and self.history.pools_carried is not False
            return True
        if kind == "online_warmup":
            self.history.warmups.append(OnlineWarmup(
                rank=rank, config=ev["config"], warm_batches=ev["warm_batches"], warm_s=ev["warm_s"],
                restart=bool(ev.get("restart")), per_epoch=bool(ev.get("per_epoch")),
                batches_per_epoch=ev.get("batches_per_epoch") or 0, t_s=ev["t_s"]))
            return True
        if kind == "online_failure":
            self.history.failures.append(OnlineFailure(rank=rank, config=ev["config"], kind=ev["kind"],
                                                       error=ev.get("error", ""), t_s=ev["t_s"],
                                                       signals=tuple(ev.get("signals") or ()),
                                                       replayed_batches=ev.get("replayed_batches"),
                                                       epoch=ev.get("epoch")))
            # (a failure while exploring is the explorer's to weigh; only the kept config's is a retreat)
            self._broke_current = self.final and self.current is not None \
                and config_key(ev["config"]) == config_key(self.current)
            return True
        if kind == "online_target":
            if rank == 0:
                self.target_loader_id = ev.get("loader_id")
            self._new_target(ev)
            return True
        if kind == "online_follow" and rank == 0:
            self.loaders.append(OnlineLoaderMode(loader_id=ev["loader_id"], mode="follows",
                                                 why_not=f"{ev.get('wait_fraction', 0):.2f}"))
            return False
        if kind == "online_loader" and rank == 0:
            self.loaders.append(OnlineLoaderMode(loader_id=ev["loader_id"], mode=ev["mode"], why_not=ev["why_not"]))
        return False

    def _on_check(self, rank: int, kind: str, ev: Dict[str, Any]) -> bool:
        """What the loop's checks said (trial/online_child.py): an epoch's order, draws a switch
        moves, a loader no longer switched; and how many batches the loop had of an epoch."""
        if kind == "online_order":
            self.order_checks.append(OnlineOrderCheck(
                rank=rank, loader_id=ev["loader_id"], epoch=ev["epoch"], iterator=ev.get("iterator", 1),
                given_batches=ev.get("given_batches", 0), delivered_batches=ev.get("delivered_batches", 0),
                given_digest=ev.get("given_digest", ""), delivered_digest=ev.get("delivered_digest", ""),
                same=bool(ev.get("same")), ended=ev.get("ended", ""), problem=ev.get("problem", ""),
                rng_moved=bool(ev.get("rng_moved")), own_iterators=ev.get("own_iterators", 0)))
            return False
        if kind == "online_randomness":
            key = (rank, ev["loader_id"], ev["where"])
            seen = self.randomness.get(key) or OnlineRandomness(
                rank=rank, loader_id=ev["loader_id"], where=ev["where"], streams=tuple(ev.get("streams") or ()),
                t_s=ev["t_s"], epoch=ev.get("epoch", 0), allowed=bool(ev.get("allowed")),
                target=bool(ev.get("target", True)))
            if ev.get("moved") and seen.moved_at_s is None:
                seen = dataclasses.replace(seen, moved_at_s=ev["t_s"])
            self.randomness[key] = seen
            return False
        if kind == "online_epoch_end":
            if ev.get("batches"):  # what the loop had of it (less than its length where it breaks out)
                self.history.epoch_ended(int(ev["batches"]))
            return False
        hold = OnlineHold(rank=rank, loader_id=ev["loader_id"], why=ev["why"], config=ev.get("config") or {},
                          t_s=ev["t_s"], detail=ev.get("detail", ""), target=bool(ev.get("target")),
                          epoch=ev.get("epoch", 0))
        self.holds.append(hold)
        if hold.target and not self.final and self.history.baseline is not None:
            self.held_why = hold.why  # the search cannot go on: it settles on what the loader keeps
            self.final, self.settled_at_s = True, hold.t_s
            predicted = predicted_count(RunEvidence(self.history, self.rank_limits(), self.space), rules.ONLINE) \
                if hold.why.startswith("rng_") and self.space is not None else None
            self._write(Next(hold.config, "held", final=True, held=hold.why, predicted_workers=predicted))
        return True

    def _new_target(self, ev: Dict[str, Any]) -> None:
        """The loader tuned from now on (the first, or a longer one, or one rebuilt): its own
        settings are the baseline; a different baseline starts the measurements over."""
        h = self.history
        self.framework = ev.get("framework") or Framework.TORCH
        self.switch_at = ev.get("switch_at") or SwitchAt.BATCH
        h.batches_per_epoch = ev.get("batches_per_epoch") or 0
        h.epoch_batches = []
        h.restarts_per_epoch = bool(ev.get("per_epoch"))
        own = ev.get("script_config")
        if own is None or (h.baseline is not None and config_key(own) == config_key(h.baseline)):
            return
        if h.baseline is not None:
            h.windows.clear()
            h.warmups.clear()
        h.baseline = own
        self.space = make_space(self.framework, own, self.limits.cpu_cap, self.limits.max_workers, None)
        if self.current is None:
            self.current = own

    def _recovering(self, config: Dict[str, Any]) -> bool:
        return bool(self.history.failures) and config_key(config) == config_key(self.history.baseline or {}) \
            and self.current is not None and config_key(self.current) != config_key(config)

    def explore_left_s(self) -> float:
        if self.first_window_s is None:
            return self.opts.explore_s
        now_s = self.clock.now_s() - self.origin_s
        spent = now_s - self.first_window_s
        budget = self.opts.explore_s
        if self.opts.explore_share is not None:  # a share of the run so far, at least a few windows' worth
            budget = max(5.0, self.opts.explore_share * now_s)
        return budget - spent

    def ranks(self) -> int:
        return max(1, len(self._offsets))

    def rank_limits(self) -> Limits:
        """Each local rank has its own loader and workers: the CPUs are shared among them (as each
        rank reported its share; else this machine's CPUs over every rank). The search decides with
        this cap, and the recommendation advises by it."""
        cap = min(self.rank_cpus.values()) if self.rank_cpus else self.limits.cpu_cap // self.ranks()
        return Limits(cpu_cap=max(1, cap), max_workers=self.limits.max_workers)

    def _retreat(self, failed: Dict[str, Any]) -> Dict[str, Any]:
        return retreat(RunEvidence(self.history, self.rank_limits(), self.space), failed)

    def _decide(self) -> None:
        if self.switch_at == SwitchAt.EPOCH and not self.history.batches_per_epoch and self.explore_left_s() > 0:
            return  # a new config starts with an epoch: chosen once the first epoch has said how long one is
        step = decide(self.history, self.rank_limits(), self.current or self.history.baseline, self.explore_left_s(),
                      self.space)
        if step.final:
            self.final = True
            self.settled_at_s = self.clock.now_s() - self.origin_s
        if config_key(step.config) != config_key(self.current or {}) or step.final:
            self._write(step)

    def _write(self, step: Next) -> None:
        self.seq += 1
        self.current, self.last_why = step.config, step.why
        payload = {"seq": self.seq, "config": step.config, "final": step.final, "why": step.why}
        if self.publish is not None:  # in the user's own process (feedprof.profile(tune=True))
            self.publish(payload)
        else:
            write_text_atomic(os.path.join(self.trial_dir, DECISION_FILE), json.dumps(payload))
        if self.on_decision is not None:
            self.on_decision(step, self.clock.now_s() - self.origin_s, self.framework)

    def tell(self, ev: Dict[str, Any]) -> None:
        """An event from the loop in this very process (no files): decide at once."""
        if self._on_event(0, ev) and not self.final and self.history.baseline is not None:
            self._decide()

    def explored_s(self) -> float:
        if self.first_window_s is None:
            return 0.0
        end = self.settled_at_s if self.settled_at_s is not None else self.clock.now_s() - self.origin_s
        return max(0.0, end - self.first_window_s)


def limits_for(opts: OnlineOptions, cpu_cap: int) -> Limits:
    return Limits(cpu_cap=cpu_cap, max_workers=opts.max_workers or defaults.max_workers(cpu_cap))


def trial_paths(out_dir: str) -> Tuple[str, str]:
    """(the run's directory, its decision file)."""
    run_dir = os.path.join(out_dir, "run")
    return run_dir, os.path.join(run_dir, DECISION_FILE)


def run_online(script: str, argv: List[str], out_dir: str, opts: OnlineOptions, launch: Any = None,
               clock: Clock = MONOTONIC, on_decision: Optional[Callable[[Next, float, str], None]] = None
               ) -> Tuple[Any, bool]:
    """Run the job once, tuning as it trains: (results, interrupted). Writes results.json."""
    from feedprof.record.clock import now_iso
    from feedprof.record.host import machine_info, usable_cpu_count
    from feedprof.store import save
    from feedprof.trial.protocol import Mode
    from feedprof.trial.runner import Injection, TrialInterrupted, TrialOptions, run_trial
    from feedprof.tune.online_result import online_result

    host = machine_info(gpu=opts.gpu)
    run_dir, decision = trial_paths(out_dir)
    os.makedirs(run_dir, exist_ok=True)
    if os.path.exists(decision):
        os.remove(decision)
    decider = Decider(run_dir, limits_for(opts, usable_cpu_count()), opts, clock, on_decision=on_decision,
                      launcher=launch.launcher if launch is not None else "")
    decider.memory = JobMemory.of_this_machine(opts.max_memory_bytes)
    topts = TrialOptions(window_batches=10 ** 9, window_seconds=opts.window_seconds,
                         min_window_batches=opts.min_window_batches, warmup_batches=0, full=True, timeout_s=None,
                         loader_timeout_s=None, interval_s=opts.interval_s, gpu=opts.gpu, capture_output=False)
    what = Injection(mode=Mode.ONLINE, site=opts.loader_site, allow_rng_change=opts.allow_rng_change,
                     allow_resharding=opts.allow_resharding)
    started_at, interrupted = now_iso(), False
    decider.origin_s = clock.now_s()
    try:
        if launch is None:
            run = run_trial(script, argv, run_dir, host, topts, what, on_poll=decider.poll, clock=clock)
        else:
            from feedprof.trial.jobrunner import run_job

            run = run_job(launch, run_dir, host, topts, what, on_poll=decider.poll, clock=clock)
    except TrialInterrupted as stop:
        run, interrupted = stop.run, True
    decider.poll()
    result = online_result(script, argv, host, started_at, clock.now_s() - decider.origin_s, run, decider,
                           launch, complete=not interrupted)
    save(result, os.path.join(out_dir, "results.json"))
    return result, interrupted
