"""The online search's evidence: the real run's windows, warm-ups and failures (RunHistory),
read as the search reads them (RunEvidence, tune/search.py ``Evidence``); ``decide`` asks the
search (tune/search.py, in the online Mode) for the next step after every window, as the parent's
Decider does (tune/online.py).

NOTE [ The online search ]  (step by step: tune/search.py, its NOTE One search)

    the script's own config ─► NEED windows ─► not input-bound (wait < 5 %)? settle on it
    climb: jump to the worker count predicted to reach the ceiling (rate × ceiling / rate,
           at least double), capped by the CPU rule and by any kill; stop when a rung is
           within 10 % of the ceiling, gains < MIN_GAIN, or the cap is reached
    refine: bisect below the cheapest count within noise of the fastest, from the highest
            count it clearly beats (rules.ONLINE.refine_floor_lead: a narrower lead may be noise)
            or the fewest workers that could supply its rate, whichever is more
    confirm: the pick and the fastest measured once more each, interleaved (A B A B),
             so drift hits both; then settle on the cheapest within noise
    the explore budget spent ─► settle on the pick so far

The compute ceiling is the step time when data is ready (a window's wall
time less its data wait): no batch is replayed inside a real run. Rates are a
job's: the slowest rank's median window, per config.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from feedprof.analyse import noise, rules
from feedprof.analyse.diagnose import workers_of
from feedprof.analyse.evidence import config_key
from feedprof.store import ConfigEvidence, Phase, Role
from feedprof.store.online import OnlineFailure, OnlineWarmup, OnlineWindow
from feedprof.store.reasons import Reason
from feedprof.tune.evidence import Next, Reading
from feedprof.tune.search import next_step
from feedprof.tune.space import Space, TorchSpace

NEED = 2  # windows per config before it is judged (each 0.5 s, on every rank)
CLEARLY_WAITING = 0.5  # a first window of the script's own settings waiting this much: climb at once
EPOCH_SHARE = 4  # workers started anew each epoch: at most a batch for every EPOCH_SHARE of the epoch


@dataclass
class RunHistory:
    """Everything measured so far in the real run: its windows, warm-ups and failures, and each
    config's evidence from them (store/evidence.py's record, as tune/history.py TrialHistory
    gives it of trials). The search reads it through RunEvidence."""

    baseline: Optional[Dict[str, Any]] = None
    windows: List[OnlineWindow] = field(default_factory=list)
    failures: List[OnlineFailure] = field(default_factory=list)
    warmups: List[OnlineWarmup] = field(default_factory=list)
    batches_per_epoch: int = 0  # of the tuned loader, as the loop has its epochs (0: unknown): see epoch_ended
    epoch_batches: List[int] = field(default_factory=list)  # each epoch the loop had, in batches
    restarts_per_epoch: bool = False  # its script's loader starts its workers anew every epoch (no persistent_workers) ...
    pools_carried: Optional[bool] = None  # ... but feedprof's pools served the next epochs (True), or no longer may (False)
    ranks_expected: int = 0  # ranks whose windows a config waits for (every rank of the job reporting here)

    def epoch_ended(self, batches: int) -> None:
        """One more epoch the loop had (fewer batches than the loader's length where it breaks out).
        Per epoch is their mean: what each start of the workers is spread over. A probe epoch of one
        batch before each (next(iter(loader)) ahead of the loop) halves it, as its own start of the
        workers doubles the starts; the last epoch alone read 1, capped the climb at 2 workers and
        charged a whole start-up to every batch."""
        self.epoch_batches.append(batches)
        self.batches_per_epoch = max(1, round(statistics.mean(self.epoch_batches)))

    def windows_of(self, config: Dict[str, Any]) -> List[OnlineWindow]:
        k = config_key(config)
        return [w for w in self.windows if config_key(w.config) == k]

    def steady_rate(self, config: Dict[str, Any]) -> Optional[float]:
        """The job's steady rate at this config: the slowest rank's median window."""
        by_rank: Dict[int, List[float]] = {}
        for w in self.windows_of(config):
            by_rank.setdefault(w.rank, []).append(w.batches_per_s)
        return min((statistics.median(r) for r in by_rank.values()), default=None)

    def epoch_cost_s(self, config: Dict[str, Any]) -> Optional[float]:
        """What starting this config's workers costs beyond its steady rate (median over its starts)."""
        steady = self.steady_rate(config)
        k = config_key(config)
        costs = [max(0.0, w.warm_s - w.warm_batches / steady) for w in self.warmups
                 if config_key(w.config) == k and steady]
        return statistics.median(costs) if costs else None

    def rate(self, config: Dict[str, Any]) -> Optional[float]:
        """What configs are ranked by: the steady rate with the workers' start-up amortised over the
        epoch, where the script's loader starts them anew every epoch (as an offline tune does)."""
        steady = self.steady_rate(config)
        cost = self.epoch_cost_s(config)
        k = config_key(config)
        per_epoch = next((w for w in self.warmups if config_key(w.config) == k and w.per_epoch), None)
        if steady is None or not cost or per_epoch is None or not per_epoch.batches_per_epoch or self.pools_carried:
            return steady
        bpe = self.batches_per_epoch or per_epoch.batches_per_epoch  # (what the loop has of one, where it breaks out)
        return rules.charge_per_epoch(steady, bpe, cost)

    def n_windows(self, config: Dict[str, Any]) -> int:
        """Windows of ``config`` every rank has measured (none while a rank has yet to report one)."""
        ranks: Dict[int, int] = {}
        for w in self.windows_of(config):
            ranks[w.rank] = ranks.get(w.rank, 0) + 1
        return min(ranks.values(), default=0) if len(ranks) >= self.ranks_expected else 0

    def wait_fraction(self, config: Dict[str, Any]) -> Optional[float]:
        ws = self.windows_of(config)
        return statistics.median(w.wait_fraction for w in ws) if ws else None

    def ceiling(self) -> Optional[float]:
        rates = [c for c in (w.ceiling_batches_per_s for w in self.windows) if c]
        return statistics.median(rates) if rates else None

    def about(self, config: Dict[str, Any]) -> Optional[ConfigEvidence]:
        """What the run's windows say of ``config`` (None: no window of it), as the offline search
        has it of its trials (store/evidence.py)."""
        ws = self.windows_of(config)
        if not ws:
            return None
        cores = [w.workers_cpu_cores for w in ws if w.workers_cpu_cores is not None]
        return ConfigEvidence(
            config=config, rate=self.rate(config), rates=tuple(w.batches_per_s for w in ws),
            measurements=self.n_windows(config), wait_fraction=self.wait_fraction(config),
            failed=self.failed(config), source="run", steady_rate=self.steady_rate(config),
            startup_s=self.epoch_cost_s(config), batches=sum(w.batches for w in ws), samples=sum(w.samples for w in ws),
            wall_s=sum(w.wall_s for w in ws), wait_s=sum(w.wait_s for w in ws),
            workers_cores=statistics.median(cores) if cores else None, figure_spread=noise.relative_spread(
                [w.batches_per_s for w in ws]),
            pool_threads=max((w.pool_threads for w in ws if w.pool_threads is not None), default=None))

    def evidence(self) -> List[ConfigEvidence]:
        """Each config measured well enough to be judged (``enough``), in the order first measured."""
        return [e for e in (self.about(c) for c in self.judged_configs()) if e is not None]

    def judged_configs(self) -> List[Dict[str, Any]]:
        """Each config measured well enough to be judged (``enough``), in the order first measured."""
        seen: Dict[str, Dict[str, Any]] = {}
        for w in self.windows:
            seen.setdefault(config_key(w.config), w.config)
        return [c for c in seen.values() if self.enough(c)]

    def enough(self, config: Dict[str, Any]) -> bool:
        """Measured well enough to be judged: NEED windows, or one of the script's own settings
        when the loop waited most of it (every second more there is the run's slowest)."""
        n = self.n_windows(config)
        if n and self.baseline is not None and config_key(config) == config_key(self.baseline):
            first = self.windows_of(config)[0]
            return n >= NEED or first.wait_fraction >= CLEARLY_WAITING
        return n >= NEED

    def most_workers_ran(self) -> int:
        """The most workers of a config the run measured without a failure (-1: none)."""
        return max((workers_of(w.config) or 0 for w in self.windows if not self.failed(w.config)), default=-1)

    def capping_failure(self) -> Optional[OnlineFailure]:
        """The failure that caps the worker count lowest (rules.caps_workers, as offline:
        analyse/limits.py): no config with as many workers after it."""
        ran = self.most_workers_ran()
        capping = [f for f in self.failures if (workers_of(f.config) or 0) >= 1
                   and rules.caps_workers(f.kind, workers_of(f.config) or 0, ran)]
        return min(capping, key=lambda f: workers_of(f.config) or 0, default=None)

    def failed(self, config: Dict[str, Any]) -> bool:
        return any(config_key(f.config) == config_key(config) for f in self.failures)


@dataclass(frozen=True)
class Limits:
    cpu_cap: int  # the CPUs a CPU-bound loader may use (per rank)
    max_workers: int


class RunEvidence:
    """The run's windows as the search reads them (tune/search.py Evidence): ``limits`` the
    rank's CPUs and the most workers; ``space`` the tuned loader's (a torch DataLoader's where a
    caller names none), which makes each config the search proposes."""

    def __init__(self, history: RunHistory, limits: Limits, space: Optional[Space] = None):
        self.history, self.limits = history, limits
        self.baseline = history.baseline
        self.space = space if space is not None else TorchSpace(history.baseline or {}, cpu_cap=limits.cpu_cap,
                                                                max_primary=limits.max_workers, cuda_used=None)
        self.cpu_cap, self.max_workers = limits.cpu_cap, limits.max_workers

    def judged(self, *stages: Phase) -> List[ConfigEvidence]:
        return self.history.evidence()

    def ceiling(self) -> Optional[float]:
        return self.history.ceiling()

    def worker_cap(self) -> Optional[int]:
        """Each epoch's pool filling stays a small part of it (workers started anew each epoch), and
        a failure that caps the workers (RunHistory.capping_failure) rules out its count and more."""
        h, caps = self.history, []
        if h.restarts_per_epoch and not h.pools_carried and h.batches_per_epoch:
            caps.append(max(2, h.batches_per_epoch // EPOCH_SHARE))
        failure = h.capping_failure()
        if failure is not None:
            caps.append(self.space.primary_of(failure.config) - 1)
        return min(caps, default=None)

    def failures(self) -> List[Tuple[Dict[str, Any], str]]:
        return [(f.config, f.kind) for f in self.history.failures]

    def most_workers_ran(self) -> int:
        return self.history.most_workers_ran()

    def pending(self, current: Optional[Dict[str, Any]], notes: List[Reason]) -> Optional[Next]:
        """The script's own settings until judged; then any config switched to, until NEED windows."""
        h, base = self.history, self.history.baseline or {}
        if not h.enough(base):
            return Next(base, "baseline", Phase.BASELINE, Role.BASELINE)
        if current is not None and config_key(current) != config_key(base) and not h.failed(current) \
                and h.n_windows(current) < NEED:
            return Next(current, "measuring")
        return None

    def believed(self, config: Dict[str, Any], *stages: Phase) -> Optional[Reading]:
        h = self.history
        ws = h.windows_of(config)
        if not ws:
            return None
        rate = h.rate(config)
        return Reading(config=config, count=self.space.primary_of(config), ended="failed" if h.failed(config) else "ok",
                       rate=rate, steady_rate=h.steady_rate(config), rate_high=rate,
                       wait_fraction=h.wait_fraction(config), cpu_bound=self._cpu_bound(config))

    def rungs(self, base: Dict[str, Any], *stages: Phase) -> List[Reading]:
        """Every judged config (each is the script's own with its workers changed)."""
        found = (self.believed(c) for c in self.history.judged_configs())
        return [r for r in found if r is not None]

    def tried(self, config: Dict[str, Any], *stages: Phase) -> bool:
        return self.history.n_windows(config) >= NEED or self.history.failed(config)

    def _cpu_bound(self, config: Dict[str, Any]) -> Optional[bool]:
        """The offline rule on a config's windows: its workers' CPU, or, where it loads in the loop
        itself, the CPU the loop spent while it waited for the batch."""
        ws = self.history.windows_of(config)
        if self.space.loads_in_loop(config):
            fractions = [w.load_cpu_fraction for w in ws if w.load_cpu_fraction is not None]
            return rules.loading_cpu_bound(statistics.median(fractions) if fractions else None)
        cores = [w.workers_cpu_cores for w in ws if w.workers_cpu_cores is not None]
        return rules.cpu_bound(self.space.primary_of(config), statistics.median(cores) if cores else None, None,
                               self.limits.cpu_cap)

    def supply_per_worker(self, count: int, *stages: Phase) -> float:
        """From the windows of the script's own settings with ``count`` workers (a loop that kept
        waiting): what one worker supplied at most."""
        slower = self.space.with_primary(self.history.baseline or {}, count)
        ws = self.history.windows_of(slower)
        wall_s = sum(w.wall_s for w in ws)
        wait_fraction = sum(w.wait_s for w in ws) / wall_s if wall_s else None
        if not self.space.loads_in_loop(slower):
            return rules.supply_per_worker(self.history.rate(slower) or 0.0, count, False, wait_fraction)
        rate = sum(w.batches for w in ws) / wall_s if wall_s else 0.0
        return rules.supply_per_worker(rate, count, True, wait_fraction)


def decide(h: RunHistory, limits: Limits, current: Dict[str, Any], explore_left_s: float,
           space: Optional[Space] = None) -> Next:
    """The next step (tune/search.py, the online Mode); ``space`` (the tuned loader's framework's)
    makes each config it proposes."""
    return next_step(RunEvidence(h, limits, space), rules.ONLINE, current, explore_left_s)
