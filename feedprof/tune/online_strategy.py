"""Online search: the next config for the real run, as a function of the
windows measured so far (Optuna's habit, as in strategy.py: no private cursor).

NOTE [ The online search ]

    the script's own config ─► NEED windows ─► not input-bound (wait < 5 %)? settle on it
    climb: jump to the worker count predicted to reach the ceiling (rate × ceiling / rate,
           at least double), capped by the CPU rule and by any kill; stop when a rung is
           within 10 % of the ceiling, gains < GAIN, or the cap is reached
    refine: bisect below the best for the cheapest count within noise of it, from the
            highest count it clearly beats (rules.ONLINE.refine_floor_lead: a narrower lead may be noise)
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
from typing import Any, Dict, List, Optional

from feedprof.analyse import evidence, noise, rules
from feedprof.analyse.diagnose import workers_of
from feedprof.analyse.evidence import config_key
from feedprof.store import ConfigEvidence
from feedprof.store.online import OnlineFailure, OnlineWarmup, OnlineWindow
from feedprof.tune.space import Space

NEED = rules.ONLINE.min_windows  # windows per config before it is judged
CONFIRM = 3  # windows of the pick and its rival before settling
GAIN = rules.MIN_GAIN  # a climb that gains less is flat
MAX_NOISE = 0.15
CLEARLY_WAITING = 0.5  # a first window of the script's own settings waiting this much: climb at once
NEAR_CEILING = rules.ONLINE.near_ceiling  # a rung this close to the ceiling ends the climb
NOT_INPUT_BOUND = rules.MIN_WAIT_FRACTION  # data-wait fraction under which loader settings cannot help
EPOCH_SHARE = 4  # workers started anew each epoch: at most a batch for every EPOCH_SHARE of the epoch


@dataclass
class RunHistory:
    """Everything measured so far in the real run: its windows, warm-ups and failures (the offline
    search's is tune/history.py TrialHistory, of trials; each gives store/evidence.py's record)."""

    baseline: Optional[Dict[str, Any]] = None
    windows: List[OnlineWindow] = field(default_factory=list)
    failures: List[OnlineFailure] = field(default_factory=list)
    warmups: List[OnlineWarmup] = field(default_factory=list)
    batches_per_epoch: int = 0  # of the tuned loader, as the loop had its last epoch (0: unknown)
    restarts_per_epoch: bool = False  # its script's loader starts its workers anew every epoch (no persistent_workers) ...
    pools_carried: Optional[bool] = None  # ... but feedprof's pools served the next epochs (True), or no longer may (False)
    ranks_expected: int = 0  # ranks whose windows a config waits for (every rank of the job reporting here)

    def of(self, config: Dict[str, Any]) -> List[OnlineWindow]:
        k = config_key(config)
        return [w for w in self.windows if config_key(w.config) == k]

    def steady_rate(self, config: Dict[str, Any]) -> Optional[float]:
        """The job's steady rate at this config: the slowest rank's median window."""
        by_rank: Dict[int, List[float]] = {}
        for w in self.of(config):
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
        for w in self.of(config):
            ranks[w.rank] = ranks.get(w.rank, 0) + 1
        return min(ranks.values(), default=0) if len(ranks) >= self.ranks_expected else 0

    def wait_fraction(self, config: Dict[str, Any]) -> Optional[float]:
        ws = self.of(config)
        return statistics.median(w.wait_fraction for w in ws) if ws else None

    def ceiling(self) -> Optional[float]:
        rates = [c for c in (w.ceiling_batches_per_s for w in self.windows) if c]
        return statistics.median(rates) if rates else None

    def about(self, config: Dict[str, Any]) -> Optional[ConfigEvidence]:
        """What the run's windows say of ``config`` (None: no window of it), as the offline search
        has it of its trials (store/evidence.py)."""
        ws = self.of(config)
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
                [w.batches_per_s for w in ws]))

    def evidence(self) -> List[ConfigEvidence]:
        """Each config measured well enough to be judged (``enough``), in the order first measured."""
        return [e for e in (self.about(c) for c in self.measured()) if e is not None]

    def margin(self) -> Optional[float]:
        """How far apart two configs' rates must be to be told apart, from their windows
        (analyse/noise.margin; None: no config measured twice)."""
        return noise.margin([e.rates for e in self.evidence()], rules.ONLINE.noise_z)

    def noise(self) -> float:
        """The margin (rules.noise_floor) never under GAIN nor over MAX_NOISE (a spread that wide
        is a measurement to repeat)."""
        return rules.noise_floor(self.margin(), least=GAIN, most=MAX_NOISE)

    def measured(self) -> List[Dict[str, Any]]:
        seen: Dict[str, Dict[str, Any]] = {}
        for w in self.windows:
            seen.setdefault(config_key(w.config), w.config)
        return [c for c in seen.values() if self.enough(c)]

    def enough(self, config: Dict[str, Any]) -> bool:
        """Measured well enough to be judged: NEED windows, or one of the script's own settings
        when the loop waited most of it (every second more there is the run's slowest)."""
        n = self.n_windows(config)
        if n and self.baseline is not None and config_key(config) == config_key(self.baseline):
            first = self.of(config)[0]
            return n >= NEED or first.wait_fraction >= CLEARLY_WAITING
        return n >= NEED

    def most_workers_ran(self) -> int:
        """The most workers of a config the run measured without a failure (-1: none)."""
        return max((workers(w.config) for w in self.windows if not self.failed(w.config)), default=-1)

    def failed(self, config: Dict[str, Any]) -> bool:
        return any(config_key(f.config) == config_key(config) for f in self.failures)


@dataclass(frozen=True)
class Limits:
    cpu_cap: int  # the CPUs a CPU-bound loader may use (per rank)
    max_workers: int


@dataclass(frozen=True)
class Step:
    config: Dict[str, Any]
    final: bool = False
    why: str = ""  # a code: baseline, climb, refine, confirm, settled, not_input_bound, budget


def workers(config: Dict[str, Any]) -> int:
    """The worker count of a config, whatever its framework calls it (num_workers, workers)."""
    return workers_of(config) or 0


def with_workers(base: Dict[str, Any], n: int, space: Optional[Space] = None) -> Dict[str, Any]:
    """``base`` with ``n`` workers, made legal by the loader's framework (its Space): the search
    walks the primary knob and keeps the script's other settings."""
    if space is None:  # a torch DataLoader: what a caller that names no space tunes
        from feedprof.tune.space import TorchSpace

        space = TorchSpace(base, cpu_cap=1, max_primary=1, cuda_used=None)
    return space.with_primary(base, n)


def worker_cap(h: RunHistory, limits: Limits, space: Optional[Space] = None) -> int:
    """The CPU rule (analyse/rules.py: past the CPUs only while the workers leave CPU idle) and
    the failures that cap the worker count (rules.caps_workers)."""
    verdicts: Dict[int, Optional[bool]] = {}
    for config in h.measured():
        verdicts.setdefault(workers(config), _cpu_bound(h, config, limits, space))
    cap = limits.max_workers if rules.may_pass_cpus(verdicts, rules.ONLINE) else max(limits.cpu_cap, 1)
    if h.restarts_per_epoch and not h.pools_carried and h.batches_per_epoch:  # each epoch's pool filling stays a small part of it
        cap = min(cap, max(2, h.batches_per_epoch // EPOCH_SHARE))
    ran = h.most_workers_ran()
    for f in h.failures:
        if rules.caps_workers(f.kind, workers(f.config), ran):  # (an error in a worker: that config alone)
            cap = min(cap, workers(f.config) - 1)
    return max(cap, 0)


def _cpu_bound(h: RunHistory, config: Dict[str, Any], limits: Limits, space: Optional[Space]) -> Optional[bool]:
    """The offline rule on a config's windows: its workers' CPU, or, where it loads in the loop
    itself, the CPU the loop spent while it waited for the batch."""
    n, ws = workers(config), h.of(config)
    if _loads_in_loop(config, space):
        fractions = [w.load_cpu_fraction for w in ws if w.load_cpu_fraction is not None]
        return rules.loading_cpu_bound(statistics.median(fractions) if fractions else None)
    cores = [w.workers_cpu_cores for w in ws if w.workers_cpu_cores is not None]
    return rules.cpu_bound(n, statistics.median(cores) if cores else None, None, limits.cpu_cap)


def _loads_in_loop(config: Dict[str, Any], space: Optional[Space]) -> bool:
    """Does the loop load each batch itself at this config (torch's 0 workers, Keras's 1)? Without
    a space: a torch DataLoader's rule."""
    return space.loads_in_loop(config) if space is not None else workers(config) == 0


def pick(h: RunHistory) -> Optional[Dict[str, Any]]:
    """The cheapest measured config within the online tolerance of the fastest (rules.pick): the
    rest of the real run pays any slowdown, so it gives away no more than the run's own noise,
    between rules.ONLINE.pick_tolerance and GAIN, for fewer workers."""
    chosen = evidence.pick(h.evidence(), workers, pick_tolerance(h))
    return chosen.config if chosen is not None else None


def pick_tolerance(h: RunHistory) -> float:
    """How close to the fastest a cheaper config may be and still be picked, in this run: its own
    noise, between rules.ONLINE.pick_tolerance and GAIN (the recommendation uses it too)."""
    return rules.noise_floor(h.margin(), least=rules.ONLINE.pick_tolerance, most=GAIN)


def fastest(h: RunHistory) -> Optional[Dict[str, Any]]:
    best = evidence.fastest(h.evidence())
    return best.config if best is not None else None


def decide(h: RunHistory, limits: Limits, current: Dict[str, Any], explore_left_s: float,
           space: Optional[Space] = None) -> Step:
    """The next step; ``space`` (the tuned loader's framework's) makes each config it proposes."""
    base = h.baseline
    if base is None:
        return Step(current, why="baseline")
    settled = pick(h) or base
    if explore_left_s <= 0:  # (first: a config that never fills a window cannot hold the search)
        return Step(settled, final=True, why="budget")
    if not h.enough(base):
        return Step(base, why="baseline")
    if config_key(current) != config_key(base) and not h.failed(current) and h.n_windows(current) < NEED:
        return Step(current, why="measuring")
    if (h.wait_fraction(base) or 0.0) < NOT_INPUT_BOUND:
        return Step(base, final=True, why="not_input_bound")
    step = _climb(h, limits, base, space) or _refine(h, base, space) or _confirm(h)
    return step or Step(settled, final=True, why="settled")


def _tried(h: RunHistory, n: int, base: Dict[str, Any], space: Optional[Space]) -> bool:
    c = with_workers(base, n, space)
    return h.n_windows(c) >= NEED or h.failed(c)


def _climb(h: RunHistory, limits: Limits, base: Dict[str, Any], space: Optional[Space]) -> Optional[Step]:
    best = fastest(h)
    ceiling = h.ceiling()
    if best is None or not ceiling:
        return None
    rate, n_best = h.steady_rate(best) or 0.0, workers(best)  # (the ceiling is a steady rate too)
    if rate >= NEAR_CEILING * ceiling or (h.wait_fraction(best) or 0.0) < 2 * NOT_INPUT_BOUND:
        return None
    higher = sorted(workers(c) for c in h.measured() if workers(c) > n_best and not h.failed(c))
    if higher or _flat(h, best):  # a larger count was not faster, or gained too little: flattened
        return None
    want = rules.jump_target(n_best, rate, ceiling, rules.ONLINE)
    n = min(want, worker_cap(h, limits, space))
    ran = h.most_workers_ran()
    capping = [workers(f.config) for f in h.failures
               if workers(f.config) > n_best and rules.caps_workers(f.kind, workers(f.config), ran)]
    if capping:  # between the best that ran and the least that failed: bisect, never step down one by one
        n = min(n, (n_best + min(capping)) // 2)
    if n <= n_best or _tried(h, n, base, space):
        return None
    return Step(with_workers(base, n, space), why="climb")


def _flat(h: RunHistory, best: Dict[str, Any]) -> bool:
    """The fastest rung gained less than GAIN over the fastest count below it that has workers
    (the NOTE's "gains < GAIN"): more workers buy nothing this run can tell from noise. Unlike
    the offline ladder (strategy.py), no flat rung is forgiven: a rung here is real training
    time at a config that may be worse, and the refinement below the best still runs."""
    n_best = workers(best)
    below = [h.rate(c) or 0.0 for c in h.measured() if 0 < workers(c) < n_best and not h.failed(c)]
    return bool(below) and (h.rate(best) or 0.0) < (1 + GAIN) * max(below)


def predicted_workers(h: RunHistory, limits: Limits, space: Optional[Space] = None) -> Optional[int]:
    """Where the script's own settings were all that ran: the count the climb would have tried
    first (the one their wait predicts reaches the ceiling), or None where they do not wait."""
    base, ceiling = h.baseline, h.ceiling()
    rate = h.steady_rate(base) if base is not None else None
    if base is None or not rate or not ceiling or (h.wait_fraction(base) or 0.0) < NOT_INPUT_BOUND:
        return None
    return max(workers(base) + 1, min(rules.jump_target(workers(base), rate, ceiling, rules.ONLINE),
                                      worker_cap(h, limits, space)))


def _refine(h: RunHistory, base: Dict[str, Any], space: Optional[Space]) -> Optional[Step]:
    best = fastest(h)
    if best is None:
        return None
    n_best, top = workers(best), h.rate(best) or 0.0
    tol = h.noise()
    sound = [c for c in h.measured() if not h.failed(c) and workers(c) < n_best]
    # the bisection's floor is a count clearly slower than the best (rules.Mode.refine_floor_lead)
    floor = (1 - max(tol, rules.ONLINE.refine_floor_lead)) * top
    slower = [workers(c) for c in sound if (h.rate(c) or 0.0) < floor]
    within = [workers(c) for c in sound if (h.rate(c) or 0.0) >= (1 - tol) * top]
    lo = max(slower, default=0)
    hi = min(within, default=n_best)
    # every refinement runs the real job on fewer workers for a while: never below the fewest
    # that could supply what the best delivers (what one worker supplies, from the slower count),
    # and only where it saves a part of them worth the windows (past the CPUs each worker also
    # costs the step CPU: fewer can be faster, not only cheaper)
    supply = _supply_per_worker(h, with_workers(base, lo, space), space)
    if supply <= 0:  # (the slower count delivered nothing: no figure to bisect from)
        return None
    least = rules.fewest_workers_to_supply((1 - tol) * top, supply) or lo + 1
    mid = (max(lo, least - 1) + hi) // 2
    if not (lo < mid < hi and mid >= least and hi - mid >= max(2, int(hi * rules.ONLINE.refine_min_saving))) \
            or _tried(h, mid, base, space):
        return None
    return Step(with_workers(base, mid, space), why="refine")


def _supply_per_worker(h: RunHistory, slower: Dict[str, Any], space: Optional[Space] = None) -> float:
    """What one worker can supply at most (rules.supply_per_worker), from the windows of a config
    that kept the loop waiting."""
    ws = h.of(slower)
    wall_s = sum(w.wall_s for w in ws)
    wait_fraction = sum(w.wait_s for w in ws) / wall_s if wall_s else None
    if not _loads_in_loop(slower, space):
        return rules.supply_per_worker(h.rate(slower) or 0.0, workers(slower), False, wait_fraction)
    rate = sum(w.batches for w in ws) / wall_s if wall_s else 0.0
    return rules.supply_per_worker(rate, workers(slower), True, wait_fraction)


def _confirm(h: RunHistory) -> Optional[Step]:
    chosen, best = pick(h), fastest(h)
    if chosen is None or best is None or config_key(chosen) == config_key(best):
        return None
    for c in sorted((chosen, best), key=lambda c: h.n_windows(c)):
        if h.n_windows(c) < CONFIRM:
            return Step(c, why="confirm")
    return None


def retreat(h: RunHistory, failed: Dict[str, Any], space: Optional[Space] = None) -> Dict[str, Any]:
    """The best measured config with fewer workers than ``failed``; without one, half its workers
    (the script's own settings where they have fewer)."""
    n = workers(failed)
    fewer = [c for c in h.measured() if workers(c) < n and not h.failed(c)]
    if fewer:
        return max(fewer, key=lambda c: h.rate(c) or 0.0)
    base = h.baseline or {}
    return base if workers(base) < n else with_workers(base, n // 2, space)
