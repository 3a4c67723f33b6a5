"""How the next config is chosen, offline and online: one search over what each config measured.

NOTE [ One search ]

    a driver's measurements, as evidence (tune/evidence.py ``Evidence``): each config's
    ConfigEvidence, its readings, failures, the compute ceiling, the worker cap
        offline: isolated trials  (tune/history.py TrialHistory; asked by tune/strategy.py for the tuner)
        online:  the real run's windows (tune/online_strategy.py RunEvidence; asked by tune/online.py)
    + a Mode (analyse/rules.py: every difference between the two, a field with its reason)
      ─► next_step ─► Next: measure this config (again, or the pick and its rival in turn),
                            or stop (final) with this pick

    step        what it does                                              Mode field
    start       the script's own settings first (online: until the       -
                loader is found); the explore budget spent: the pick
    pending     a config whose measurements do not judge it yet is        - (the evidence's: offline a
                measured again or further                                   window that spread, a rung that
                                                                             dips; online < NEED windows)
    ceiling     one batch replayed: the compute ceiling                   ceiling_trial
    unwaiting   the loop barely waits at its own settings: keep them      keeps_unwaiting_settings
    pools       workers whose thread pools ask for more threads than the  -
                cores: that config with the pools held, once; where it
                wins, the climb holds them too (tune/pools_step.py)
    climb       offline the ladder 0, 2, 4, 8, ... (jumping ahead while   climb_by_rungs, jump_margin,
                the loop mostly waits and the CPUs have room); online      near_ceiling, pass_cpus_unmeasured
                from the fastest straight to the predicted count;
                both stop near the ceiling, on a flat rung (MIN_GAIN),
                at the worker cap, at CPU-bound CPUs
    refine      bisect below the cheapest within tolerance of the         refine_floor_lead, refine_min_saving,
                fastest, never below the fewest workers that could          refine_least_saving, refine_most_steps,
                supply its rate (offline also towards a slower count       refine_above, tolerance_follows_noise
                above)
    secondary   the other knobs at the pick                               secondary_knobs
    confirm     the pick and its rival again, interleaved                 confirm_by_rounds
    figures     the pick after it was chosen, the script's own beside it  figure_windows
    stop        the cheapest within tolerance of the fastest              pick_tolerance, noise_z,
                (rules.pick; the recommendation picks by it too)           tolerance_follows_noise

Nothing is kept between asks but what the evidence holds: resuming a tune is telling the trials
again and asking. Steps that need what only isolated trials tell (repeats, phases, the machine's
other load) read ``TrialEvidence`` (tune/evidence.py); the Mode fields that select them are offline's.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple, cast

from feedprof.analyse import noise, rules
from feedprof.analyse.evidence import config_key
from feedprof.analyse.stats import median
from feedprof.store import ConfigEvidence, Phase, Role, TrialState
from feedprof.store.reasons import (CpusSaturated, FlatRung, JumpedAhead, LadderStoppedByTrial, LoopBarelyWaits,
                                    MaxWorkersReached, PastCpuCount, ReachedCeiling, Reason, RivalsRemeasured)
from feedprof.tune.evidence import Evidence, Next, Reading, TrialEvidence
from feedprof.tune.pools_step import climb_base, pools_step
from feedprof.tune.space import Config, Space

JUMP_MIN_WAIT, JUMP_MAX_STARTUP_S = 0.5, 10.0  # the ladder jumps while the loop mostly waits, to workers this quick to start
CONFIRM_WINDOWS = 3  # online: windows of the pick and of the fastest before settling
CONFIRM_MARGIN = (0.10, 0.30)  # offline: a rival this close (or within twice the measured spread) is measured again
CONFIRM_ROUNDS = 2  # offline: at most this many repeats of each of the two (interleaved, longer windows)
BUSY_EXTRA_ROUNDS = 1  # ... and this many more on a busy machine (noise.is_busy)
CONFIRM_AGREE = 0.10  # the pick's figure windows agree when each is this close to their median
CONFIRM_PICK_WINDOWS = 3  # at most this many figure windows of the pick, where the budget allows more than one
LADDER = (Phase.BASELINE, Phase.LADDER)  # what each step reads: the stages before it and its own
REFINING = (Phase.BASELINE, Phase.LADDER, Phase.REFINE)
SEARCHED = (Phase.BASELINE, Phase.LADDER, Phase.REFINE, Phase.SECONDARY)


Step = Callable[[Evidence, rules.Mode, Optional[Config], List[Reason]], Optional[Next]]


def next_step(ev: Evidence, mode: rules.Mode, current: Optional[Config] = None,
              budget_left_s: Optional[float] = None, notes: Optional[List[Reason]] = None) -> Next:
    """The next step of the search (this module's NOTE); ``notes``: how it went, appended."""
    said: List[Reason] = [] if notes is None else notes
    if ev.baseline is None:  # (online: the tuned loader is not found yet)
        return Next(dict(current or {}), "baseline", Phase.BASELINE, Role.BASELINE)
    if budget_left_s is not None and budget_left_s <= 0:  # (first: a config that never fills a window cannot hold it)
        return settle(ev, mode, "budget")
    steps: Tuple[Step, ...] = (_pending, _ceiling, _keep_unwaiting, pools_step, _climb, _refine, _secondary, _confirm,
                               _figures)
    for step in steps:
        found = step(ev, mode, current, said)
        if found is not None:
            return found
    return settle(ev, mode, "settled")


def settle(ev: Evidence, mode: rules.Mode, why: str) -> Next:
    """Stop with the pick (the script's own settings where nothing else was judged)."""
    chosen = choice(ev, mode)
    return Next(chosen.config if chosen is not None else dict(ev.baseline or {}), why, final=True)


def choice(ev: Evidence, mode: rules.Mode) -> Optional[ConfigEvidence]:
    """What the search would settle on now: the cheapest judged config within the pick's tolerance
    of the fastest (rules.pick)."""
    return rules.pick(ev.judged(), ev.space.cost, pick_tolerance(ev, mode))


def pick_tolerance(ev: Evidence, mode: rules.Mode) -> float:
    """The pick's tolerance on this evidence (never under its noise where the mode says so)."""
    return rules.pick_tolerance(noise_margin(ev, mode), mode)


def noise_margin(ev: Evidence, mode: rules.Mode) -> Optional[float]:
    """How far apart two configs' rates must be to be told apart, from their measurements
    (noise.margin at the mode's z; None: no config measured twice)."""
    return noise.margin([e.rates for e in ev.judged()], mode.noise_z)


def _of(evidence: Sequence[ConfigEvidence], config: Optional[Config]) -> Optional[ConfigEvidence]:
    key = config_key(config or {})
    return next((e for e in evidence if config_key(e.config) == key), None)


# -- before the climb ------------------------------------------------------------------


def _pending(ev: Evidence, mode: rules.Mode, current: Optional[Config], notes: List[Reason]) -> Optional[Next]:
    return ev.pending(current, notes)


def _ceiling(ev: Evidence, mode: rules.Mode, current: Optional[Config], notes: List[Reason]) -> Optional[Next]:
    """Offline: one cached batch replayed, so loading costs nothing (Mode.ceiling_trial)."""
    if not mode.ceiling_trial or cast(TrialEvidence, ev).ceiling_tried():
        return None
    return Next(ev.space.ceiling_config(), "ceiling", Phase.CEILING, Role.CEILING)


def _keep_unwaiting(ev: Evidence, mode: rules.Mode, current: Optional[Config],
                    notes: List[Reason]) -> Optional[Next]:
    """Online: a loop that barely waits at its own settings keeps them (Mode.keeps_unwaiting_settings)."""
    if not mode.keeps_unwaiting_settings:
        return None
    own = _of(ev.judged(), ev.baseline)
    if ((own.wait_fraction if own is not None else None) or 0.0) < rules.MIN_WAIT_FRACTION:
        return Next(dict(ev.baseline or {}), "not_input_bound", final=True)
    return None


# -- the climb ---------------------------------------------------------------------------


def _climb(ev: Evidence, mode: rules.Mode, current: Optional[Config], notes: List[Reason]) -> Optional[Next]:
    if mode.climb_by_rungs:
        return _ladder(cast(TrialEvidence, ev), mode, notes)
    return _jump(ev, mode)


def gains_too_little(rate_high: Optional[float], rates_below: Sequence[float]) -> bool:
    """A flat rung: even its fastest stretch gains less than MIN_GAIN over the fastest below."""
    return bool(rates_below) and rate_high is not None and rate_high < max(rates_below) * (1 + rules.MIN_GAIN)


def _ladder(ev: TrialEvidence, mode: rules.Mode, notes: List[Reason]) -> Optional[Next]:
    """Walk the rungs up; the first one not measured yet is the next step (None: the climb is over)."""
    sp, base, cap = ev.space, climb_base(ev, ev.ladder_base()), ev.worker_cap()
    rungs, on_ladder, ceiling = sp.rungs(ev.max_workers), ev.rungs(base, *LADDER), ev.ceiling()
    flat = i = 0
    while i < len(rungs):
        n = rungs[i]
        if cap is not None and n > cap:
            return _below_cap(ev, base, cap, on_ladder)
        below = [r for r in on_ladder if r.count < n]
        if n > ev.cpu_cap and _cpus_full(below, ev.cpu_cap, mode, notes):
            return None
        done = ev.believed(sp.with_primary(base, n), *LADDER)
        if done is None:
            jump = _ladder_jump(below, ceiling, ev.cpu_cap, mode)
            if jump is not None and jump > n:  # to the predicted count itself (a rung past it can overshoot a peak)
                n = min(jump, rungs[-1])
                while i + 1 < len(rungs) and rungs[i + 1] <= n:
                    i += 1
                if cap is not None and n > cap:
                    return _below_cap(ev, base, cap, on_ladder)
                notes.append(JumpedAhead(knob=sp.primary, n=n))
                done = ev.believed(sp.with_primary(base, n), *LADDER)
            if done is None:
                return Next(sp.with_primary(base, n), "climb", Phase.LADDER)
            below = [r for r in on_ladder if r.count < n]
        stop, flat = _rung_ends_climb(done, below, flat, ceiling, sp.primary, mode, notes)
        if stop:
            return None
        i += 1
    notes.append(MaxWorkersReached(max_workers=ev.max_workers))
    return None


def _below_cap(ev: Evidence, base: Config, cap: int, on_ladder: Sequence[Reading]) -> Optional[Next]:
    """The next rung is past the worker cap (a count that duplicated data, was killed or failed):
    bisect between the most workers that worked and it."""
    upper, lower = cap + 1, max((r.count for r in on_ladder), default=0)
    mid = (lower + upper) // 2
    config = ev.space.with_primary(base, mid)
    if mid <= lower or mid >= upper or ev.believed(config, *LADDER) is not None:
        return None
    return Next(config, "climb", Phase.LADDER)


def _rung_verdicts(below: Sequence[Reading]) -> Dict[int, Optional[bool]]:
    """Each rung's CPU verdict, by its workers: rungs with more than one worker (the first of each)."""
    verdicts: Dict[int, Optional[bool]] = {}
    for r in below:
        if not r.own and r.count > 1:
            verdicts.setdefault(r.count, r.cpu_bound)
    return verdicts


def _cpus_full(below: Sequence[Reading], cpu_cap: int, mode: rules.Mode, notes: List[Reason]) -> bool:
    """Going past the CPU count: only while the workers leave CPU idle (rules.may_pass_cpus)."""
    verdicts = _rung_verdicts(below)
    if not rules.may_pass_cpus(verdicts, mode):
        notes.append(CpusSaturated(cpu_cap=cpu_cap))
        return True
    if rules.cpu_bound_at_most(verdicts) is not None:
        notes.append(PastCpuCount(cpu_cap=cpu_cap))
    return False


def _ladder_jump(below: Sequence[Reading], ceiling: Optional[float], cpu_cap: int,
                 mode: rules.Mode) -> Optional[int]:
    """Workers predicted to reach what the ceiling and the CPU budget allow, from the highest rung
    below (None: keep doubling). The loader must be the limit (the loop mostly waits) and the
    CPUs must have room: a loader that already fills the CPUs gets no jump."""
    rungs = [r for r in below if r.count >= 2]
    if not rungs or not ceiling or rules.cpu_bound_at_most(_rung_verdicts(below)) is not False:
        return None
    last = max(rungs, key=lambda r: r.count)
    if not last.rate or last.wait_fraction is None or last.wait_fraction < JUMP_MIN_WAIT:
        return None
    needed = rules.jump_target(last.count, last.rate, ceiling, mode, job_cores=last.job_cores, cpu_cap=cpu_cap,
                               worker_start_s=last.start_s, max_start_s=JUMP_MAX_STARTUP_S)
    return needed if needed > 2 * last.count else None


def _rung_ends_climb(done: Reading, below: Sequence[Reading], flat: int, ceiling: Optional[float], knob: str,
                     mode: rules.Mode, notes: List[Reason]) -> Tuple[bool, int]:
    """After a measured rung: (is the ladder done?, flat rungs so far). One flat rung is forgiven
    while the loop mostly waits and the workers leave CPU idle: handing batches over may have
    held it back, which more workers overlap."""
    if done.ended != TrialState.OK:
        notes.append(LadderStoppedByTrial(knob=knob, n=done.count, state=done.ended))
        return True, flat
    if _ladder_fed(done, ceiling, knob, mode, notes):
        return True, flat
    if done.count >= 2 and gains_too_little(done.rate_high, [r.rate or 0.0 for r in below]):
        flat += 1
        wait = done.wait_fraction
        forgiven = flat == 1 and wait is not None and wait >= JUMP_MIN_WAIT and done.cpu_bound is False
        notes.append(FlatRung(knob=knob, n=done.count, min_gain=rules.MIN_GAIN, forgiven=forgiven))
        return not forgiven, flat
    return False, flat


def _ladder_fed(done: Reading, ceiling: Optional[float], knob: str, mode: rules.Mode, notes: List[Reason]) -> bool:
    """Is there nothing left for loader work to gain at this rung? Near the ceiling (unless the
    loop still waits: a ceiling never decides alone); without a ceiling, a loop that barely waits."""
    wait, rate = done.wait_fraction, done.rate
    if ceiling:
        if rate is not None and rate >= ceiling * mode.near_ceiling and (wait is None or wait < rules.WAITING_ON_LOADER):
            notes.append(ReachedCeiling(knob=knob, n=done.count))
            return True
        return False
    if wait is not None and wait < rules.MIN_WAIT_FRACTION:
        notes.append(LoopBarelyWaits(knob=knob, n=done.count, wait_fraction=wait, below=rules.MIN_WAIT_FRACTION))
        return True
    return False


def _jump(ev: Evidence, mode: rules.Mode) -> Optional[Next]:
    """From the fastest so far, straight to the count predicted to reach the ceiling, within the
    climb's cap; never between the fastest and a count that failed: bisected."""
    judged, ceiling, sp = ev.judged(), ev.ceiling(), ev.space
    best = rules.fastest(judged)
    if best is None or not ceiling:
        return None
    rate, n_best = best.steady_rate or 0.0, sp.primary_of(best.config)  # (the ceiling is a steady rate too)
    if rate >= mode.near_ceiling * ceiling or (best.wait_fraction or 0.0) < 2 * rules.MIN_WAIT_FRACTION:
        return None
    sound = [e for e in judged if not e.failed]
    below = [e.rate or 0.0 for e in sound if 0 < sp.primary_of(e.config) < n_best]
    if any(sp.primary_of(e.config) > n_best for e in sound) or gains_too_little(best.rate or 0.0, below):
        return None  # a larger count was not faster, or this one gained too little: flattened
    n = min(rules.jump_target(n_best, rate, ceiling, mode), climb_cap(ev, mode))
    ran = ev.most_workers_ran()
    capping = [w for c, kind in ev.failures() if (w := sp.primary_of(c)) > n_best and rules.caps_workers(kind, w, ran)]
    if capping:  # between the best that ran and the least that failed: bisect, never step down one by one
        n = min(n, (n_best + min(capping)) // 2)
    config = sp.with_primary(climb_base(ev, dict(ev.baseline or {})), n)
    if n <= n_best or ev.tried(config):
        return None
    return Next(config, "climb", Phase.LADDER)


def climb_cap(ev: Evidence, mode: rules.Mode) -> int:
    """The most workers the jump may reach: past the CPUs only while the most workers measured
    leave CPU idle (rules.may_pass_cpus), and within what failed allows (ev.worker_cap)."""
    verdicts: Dict[int, Optional[bool]] = {}
    for r in ev.rungs(dict(ev.baseline or {})):
        verdicts.setdefault(r.count, r.cpu_bound)
    cap = ev.max_workers if rules.may_pass_cpus(verdicts, mode) else max(ev.cpu_cap, 1)
    limit = ev.worker_cap()
    return max(cap if limit is None else min(cap, limit), 0)


def predicted_count(ev: Evidence, mode: rules.Mode) -> Optional[int]:
    """Where the script's own settings were all that ran: the count the jump would have tried
    first (the one their wait predicts reaches the ceiling), or None where they do not wait."""
    base, ceiling = ev.baseline, ev.ceiling()
    own = ev.believed(base) if base is not None else None
    if base is None or own is None or not own.steady_rate or not ceiling \
            or (own.wait_fraction or 0.0) < rules.MIN_WAIT_FRACTION:
        return None
    n = ev.space.primary_of(base)
    return max(n + 1, min(rules.jump_target(n, own.steady_rate, ceiling, mode), climb_cap(ev, mode)))


# -- refine ----------------------------------------------------------------------------------


def _refine(ev: Evidence, mode: rules.Mode, current: Optional[Config], notes: List[Reason]) -> Optional[Next]:
    """Bisect towards the cheapest count within tolerance of the fastest: below it, from the most
    workers that read clearly slower (Mode.refine_floor_lead), never below the fewest that could
    supply the fastest's rate, only where a step saves enough (refine_min_saving,
    refine_least_saving); above it, towards a clearly slower count (refine_above). The wider
    gap first."""
    if mode.refine_most_steps is not None \
            and cast(TrialEvidence, ev).measured_in(Phase.REFINE) >= mode.refine_most_steps:
        return None
    sp, judged = ev.space, [e for e in ev.judged(*REFINING) if not e.failed]
    tol = rules.refine_tolerance(noise_margin(ev, mode), mode)
    best, ref = rules.fastest(judged), rules.pick(judged, sp.cost, tol)
    if best is None or ref is None:
        return None
    n, top = sp.primary_of(ref.config), best.rate or 0.0
    floor = (1 - max(tol, mode.refine_floor_lead)) * top
    lo = max((sp.primary_of(e.config) for e in judged if sp.primary_of(e.config) < n and (e.rate or 0.0) < floor),
             default=0)
    supply = ev.supply_per_worker(lo, *REFINING)
    if supply <= 0:  # (the slower count delivered nothing: no figure to bisect from)
        return None
    least = rules.fewest_workers_to_supply((1 - tol) * top, supply) or lo + 1
    gaps = [(max(lo, least - 1), n)] + ([(n, _slower_above(sp, judged, ref, tol))] if mode.refine_above else [])
    for a, b in sorted((g for g in gaps if g[1] is not None and g[1] - g[0] >= 2), key=lambda g: (g[0] - g[1], g[0])):
        mid = (a + b) // 2
        if b == n and n - mid < max(mode.refine_least_saving, int(n * mode.refine_min_saving)):
            continue
        config = sp.with_primary(ref.config, mid)
        if not ev.tried(config, *REFINING):
            return Next(config, "refine", Phase.REFINE)
    return None


def _slower_above(sp: Space, judged: Sequence[ConfigEvidence], ref: ConfigEvidence, tol: float) -> Optional[int]:
    """The least count above the reference, where it read clearly slower (a peak between the two
    is unmeasured); None for a reference without workers (1 worker rarely beats none where 2 did not)."""
    n = sp.primary_of(ref.config)
    if n == 0:
        return None
    above = min((e for e in judged if sp.primary_of(e.config) > n), key=lambda e: sp.primary_of(e.config), default=None)
    if above is None or (above.rate or 0.0) >= (ref.rate or 0.0) * (1 - tol):
        return None
    return sp.primary_of(above.config)


# -- the other knobs, confirming, figures ---------------------------------------------------


def _secondary(ev: Evidence, mode: rules.Mode, current: Optional[Config], notes: List[Reason]) -> Optional[Next]:
    """Offline: the other knobs at the pick, a trial each (Mode.secondary_knobs)."""
    if not mode.secondary_knobs:
        return None
    trials = cast(TrialEvidence, ev)
    best = rules.pick(ev.judged(*SEARCHED), ev.space.cost, mode.pick_tolerance)
    if best is None:
        return None
    for variant in trials.variants(best.config, *SEARCHED):
        if not ev.tried(variant.config, *SEARCHED):
            role = Role.PROBE if ev.space.probe_only(variant.config) else Role.SEARCH  # (space_order.py)
            return Next(ev.space.legalize(variant.config), "secondary", Phase.SECONDARY, role,
                        min_window_batches=variant.min_window_batches)
    return None


def _confirm(ev: Evidence, mode: rules.Mode, current: Optional[Config], notes: List[Reason]) -> Optional[Next]:
    if mode.confirm_by_rounds:
        return _rivals(cast(TrialEvidence, ev), mode, notes)
    chosen, best = choice(ev, mode), rules.fastest(ev.judged())  # online: the pick and the fastest
    if chosen is None or best is None or config_key(chosen.config) == config_key(best.config):
        return None
    for e in sorted((chosen, best), key=lambda e: e.measurements):
        if e.measurements < CONFIRM_WINDOWS:
            return Next(e.config, "confirm", Phase.CONFIRM)
    return None


def _rivals(ev: TrialEvidence, mode: rules.Mode, notes: List[Reason]) -> Optional[Next]:
    """Offline: the pick and its strongest rival, within noise of each other, measured again
    interleaved (the rival first), round after round until their repeats tell them apart, or
    show them equal within tolerance, or the rounds are done (one more on a busy machine)."""
    before = ev.judged(*SEARCHED)
    chosen = rules.pick(before, ev.space.cost, mode.pick_tolerance)
    if chosen is None or len(before) < 2:
        return None
    rival = max((e for e in before if config_key(e.config) != config_key(chosen.config)), key=lambda e: e.rate or 0.0)
    spread = max(ev.spread(chosen.config, *SEARCHED), ev.spread(rival.config, *SEARCHED))
    within = min(CONFIRM_MARGIN[1], max(CONFIRM_MARGIN[0], 2 * spread))
    rates = (chosen.rate or 0.0, rival.rate or 0.0)
    if min(rates) < max(rates) * (1 - within):
        return None
    done, busy = ev.measured_in(Phase.CONFIRM), ev.busy()
    rounds = done // 2
    notes.append(RivalsRemeasured(pick=dict(chosen.config), rival=dict(rival.config), margin=within,
                                  repeats=rounds + (done % 2 == 1) or 1, busy=busy))
    if ev.measured_in(Phase.REPORT):
        return None  # the figures are being measured: the choice is made
    most = CONFIRM_ROUNDS + (BUSY_EXTRA_ROUNDS if busy else 0)
    if done % 2 == 0 and (rounds >= most or (rounds and _settled(ev, chosen, rival, mode))):
        return None
    nxt = rival if done % 2 == 0 else chosen
    factor, batches = ev.confirm_window(nxt.config, *SEARCHED)
    return Next(dict(nxt.config), "confirm", Phase.CONFIRM, Role.CONFIRM, window_factor=factor,
                min_window_batches=batches)


def _settled(ev: Evidence, chosen: ConfigEvidence, rival: ConfigEvidence, mode: rules.Mode) -> bool:
    """With every repeat so far: told apart either way, or equal within tolerance as precisely as
    more rounds could say."""
    judged = ev.judged()
    a, b = (list(e.rates) if e is not None else [] for e in (_of(judged, chosen.config), _of(judged, rival.config)))
    told = noise.margin([a, b], mode.noise_z)
    if told is None:
        return False
    return noise.told_apart(a, b, told) or noise.told_apart(b, a, told) or told <= mode.pick_tolerance


def _figures(ev: Evidence, mode: rules.Mode, current: Optional[Config], notes: List[Reason]) -> Optional[Next]:
    """Offline (Mode.figure_windows): one window of what will be recommended, measured after it
    was chosen (its figure comes from it, not from the best of the windows it was chosen on),
    across an epoch boundary where an epoch is short enough; then the script's own settings
    beside it (the speedup is a ratio of two windows side by side); then the pick again while
    its windows disagree, where the budget has room."""
    if not mode.figure_windows:
        return None
    trials = cast(TrialEvidence, ev)
    chosen, own = trials.recommended()
    if chosen is None:
        return None
    for config in (chosen, own):
        if config is not None and not trials.confirm_rates(config) and not trials.reports(config):
            return _figure_window(trials, config)
    if trials.reports(chosen) < CONFIRM_PICK_WINDOWS and not _figures_agree(trials.confirm_rates(chosen)):
        return _figure_window(trials, chosen, optional=True)
    return None


def _figure_window(ev: TrialEvidence, config: Config, optional: bool = False) -> Next:
    factor, batches = ev.confirm_window(config)
    return Next(dict(config), "figure", Phase.REPORT, Role.CONFIRM, window_factor=factor, min_window_batches=batches,
                optional=optional)


def _figures_agree(measured: Sequence[Optional[float]]) -> bool:
    """Do the pick's figure windows agree (or are there enough of them)? On a shared machine two
    adjacent windows of one config can differ by a quarter; the figure is their median, so a
    third settles which of two that disagree was the outlier."""
    rates = [r for r in measured if r]
    if len(rates) >= CONFIRM_PICK_WINDOWS or not rates:
        return True
    mid = median(rates) or 0.0
    return len(rates) > 1 and all(abs(r - mid) <= CONFIRM_AGREE * mid for r in rates)


def retreat(ev: Evidence, failed: Config) -> Config:
    """After ``failed`` broke the run: the best judged config with fewer workers; without one,
    half its workers (the script's own settings where they have fewer)."""
    sp, n = ev.space, ev.space.primary_of(failed)
    fewer = [e for e in ev.judged() if sp.primary_of(e.config) < n and not e.failed]
    if fewer:
        return max(fewer, key=lambda e: e.rate or 0.0).config
    base = dict(ev.baseline or {})
    return base if sp.primary_of(base) < n else sp.with_primary(base, n // 2)

