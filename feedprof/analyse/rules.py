"""The rules the search decides by, written once, and ``Mode``: where offline (isolated trials)
and online (stretches of the real run) must decide differently, each difference a field with its
reason. The search itself, step by step, is tune/search.py (its NOTE, One search); recommend()
(analyse/recommend.py) reads the same rules, so the two cannot disagree about what is CPU-bound,
how far to jump, what counts as noise or which config to pick.

NOTE [ One decision core ]

    evidence of a config (store/evidence.py ConfigEvidence, from trials or from the run's windows):
    its rate (median of its measurements), their rates (the noise), the loop's data wait, the
    workers' CPU (and their wait for a CPU), its start-up, its failures
      ─► cpu_bound ─► may the workers outnumber the CPUs? (may_pass_cpus)
      ─► jump_target ─► the worker count predicted to reach the ceiling, within the CPU budget
      ─► tightest_cap ─► a kill, memory (a hang: past what ran well): no config with as many workers after it
      ─► pick ─► the cheapest config within tolerance of the fastest (tolerance >= the noise where
                 Mode.tolerance_follows_noise: pick_tolerance)
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

from feedprof import defaults
from feedprof.analyse.evidence import config_key
from feedprof.store.evidence import ConfigEvidence

BUSY_WORKER_CORES = 0.9  # a worker that would use this much of a core (running, or waiting for a CPU) computes
SATURATED_SHARE = 0.95  # workers whose demand fills this share of the usable CPUs fill them: more only compete
MIN_GAIN = 0.05  # a climb whose rung gains less over the rungs below is flat (both searches stop climbing)
MIN_WAIT_FRACTION = 0.05  # a loop that waits less than this share of its time is not held back by its loader
# A loop that waits this share of its time is held back by its loader, whatever a compute ceiling
# reads (the TensorFlow Profiler's "highly input-bound"): the ceiling never stops the ladder alone
# (Mode.near_ceiling).
WAITING_ON_LOADER = 0.20
# How a config ended (offline a trial's state and cause, online a failure seen in the run): killed
# (SIGKILL: RAM; SIGBUS: /dev/shm), memory (the job measured over the memory budget: online),
# rejected (predicted over the budget before it ran: offline), hung (no batch in time),
# worker_hazard (an error more workers cause: too many open files, CUDA in a forked worker;
# offline), error (any other error raised loading a batch)
FAILURE_KINDS = ("killed", "memory", "rejected", "hung", "worker_hazard", "error")

Config = Dict[str, Any]


@dataclass(frozen=True)
class Mode:
    """Where offline and online must decide differently, and why: the search (tune/search.py) reads
    every field. (What each can measure differs too, and is the evidence's, not a decision: offline
    a trial's window, read in chunks, measured again where it spread; online windows of the run, a
    config judged on several of them, on every rank.)"""

    # How close to the fastest a cheaper config may be and still be picked. Offline a trial costs
    # only itself and its figure is measured again after it is chosen: --tolerance (3 %). Online
    # the rest of the real run pays any slowdown, and no config is measured again afterwards: 3 %.
    pick_tolerance: float
    # Is the tolerance never under the run's own noise (pick_tolerance, refine_tolerance)? Online
    # yes: a window is 0.5 s (a trial's 2 s), and a pick inside the noise is a coin toss the rest
    # of the run pays for. Offline no: rivals within noise are measured again until told apart
    # (confirm_by_rounds), and a cheaper config the margin cannot tell apart is advised
    # (analyse/recommend.py cheaper_within_noise).
    tolerance_follows_noise: bool
    # How many typical spreads (noise.margin: shrunk by the measurements behind each rate) two
    # configs' rates must differ by to be told apart. Offline a cheaper config replaces a faster
    # one it cannot be told apart from, on two or three trials each: a measured lead is given up
    # only inside 1.5 of them. Online the margin is the least pick tolerance, between the
    # tolerance and MIN_GAIN (never more than a small slowdown of the rest of the run): 1.
    noise_z: float
    # Is the compute ceiling a trial of its own? Offline a trial replays one cached batch, so the
    # loader costs nothing. Online a replayed batch would train the model on repeated data: the
    # step time when data is ready (a window's wall time less its data wait) stands in for it,
    # read from every window.
    ceiling_trial: bool
    # Does a loop that barely waits at the script's own settings (MIN_WAIT_FRACTION) keep them at
    # once? Online yes: exploring costs real training time and cannot gain. Offline no: the
    # ladder's first rungs are short trials, and the ceiling trial says how far off the loader is.
    keeps_unwaiting_settings: bool
    # How the climb goes up. Offline a rung is one short trial: the ladder walks 0, 2, 4, 8, ...
    # (the CPU count among them), every rung a point of the curve, jumping ahead while the loop
    # mostly waits and the CPUs have room, one flat rung forgiven. Online every window at too few
    # workers is real training time lost: from the fastest so far, straight to the count
    # predicted to reach the ceiling, never a flat rung forgiven (the refinement below still runs).
    climb_by_rungs: bool
    # How far past the predicted count a jump reaches. Offline the ladder's next rung comes
    # cheaply, so it aims at the count itself (1 - the tolerance). Online every window at too few
    # workers is real training time lost, so it aims 10 % past it, and refines down afterwards.
    jump_margin: float
    # The share of the ceiling at which the climb stops: the loader feeds the step. Offline
    # within the pick tolerance (1 - the tolerance), and only where the loop no longer waits a
    # fifth of its time (a ceiling trial is the step on a replayed batch; it never decides alone).
    # Online the ceiling, the step time when data is ready, leaves out handing a batch over, so a
    # fed loop reads a few per cent under it: 10 %, and it decides alone.
    near_ceiling: float
    # May the workers outnumber the CPUs before any config's CPU use says whether they leave it
    # idle (may_pass_cpus)? Offline, yes: a rung past them is one short trial, and the ladder
    # stops at the first that gains too little. Online, no: a window at too many CPU-bound
    # workers is real training time spent competing for the CPUs.
    pass_cpus_unmeasured: bool
    # How much slower than the best a measured count must read to bound the refinement from below
    # (the counts under it are not tried). Offline, any count below the pick: the pick is the
    # cheapest within tolerance, and a trial's 2 s window, read in chunks, is measured again where
    # rivals are close. Online a config is judged on two 0.5 s windows that read ±6-7 % each on a
    # shared machine: a lead under 10 % may be noise, so the counts below it are still tried
    # (ddp_io: 22 workers read 8 % under 32, and the independent harness found 8 faster than both).
    refine_floor_lead: float
    # What a refinement step must save to be tried: a share of the workers of the cheapest count
    # within noise of the best, and at least this many workers. Offline a step is one short trial:
    # any worker saved, at most refine_most_steps of them. Online each step runs the real job on
    # fewer workers for two windows: only where it saves an eighth, and at least 2 workers.
    # (Neither goes below the fewest workers that could supply the best's rate:
    # fewest_workers_to_supply.)
    refine_min_saving: float
    refine_least_saving: int
    refine_most_steps: Optional[int]  # (None: until the bisection closes)
    # Does the refinement also bisect above the pick, towards a clearly slower count? Offline yes:
    # the ladder's doubling rungs can step over a peak. Online no: the climb aims past the
    # predicted count and comes down from it; a larger count was measured slower already.
    refine_above: bool
    # Are the other knobs (prefetch depth, pinned memory, persistent workers, threads against
    # processes) tried at the pick? Offline yes, a trial each. Online no: the switch changes the
    # worker count alone (its other settings are the script's; persistent workers are judged from
    # the run: tune/online_result.py).
    secondary_knobs: bool
    # How the pick and its rival are measured again, interleaved so drift hits both. Offline in
    # rounds of one trial each, the rival first, while they are within noise of each other, until
    # their repeats tell them apart (more rounds, longer windows, on a busy machine). Online the
    # pick and the fastest, where they differ, one more window each (CONFIRM_WINDOWS), then settle.
    confirm_by_rounds: bool
    # Is the pick measured again after it was chosen, with the script's own settings beside it,
    # for the figures reported? Offline yes (the best of several noisy windows reads high).
    # Online the rest of the run is the settled config's measurement.
    figure_windows: bool


def offline_mode(tolerance: float) -> Mode:
    """OFFLINE with the tune's --tolerance: the pick's, the jump's aim and the ceiling's reach."""
    return dataclasses.replace(OFFLINE, pick_tolerance=tolerance, jump_margin=1 - tolerance,
                               near_ceiling=1 - tolerance)


OFFLINE = Mode(pick_tolerance=defaults.TOLERANCE, tolerance_follows_noise=False, noise_z=1.5, ceiling_trial=True,
               keeps_unwaiting_settings=False, climb_by_rungs=True, jump_margin=1 - defaults.TOLERANCE,
               near_ceiling=1 - defaults.TOLERANCE,
               pass_cpus_unmeasured=True, refine_floor_lead=0.0, refine_min_saving=0.0, refine_least_saving=1,
               refine_most_steps=3, refine_above=True, secondary_knobs=True, confirm_by_rounds=True,
               figure_windows=True)
ONLINE = Mode(pick_tolerance=0.03, tolerance_follows_noise=True, noise_z=1.0, ceiling_trial=False,
              keeps_unwaiting_settings=True, climb_by_rungs=False, jump_margin=1.10, near_ceiling=0.90,
              pass_cpus_unmeasured=False, refine_floor_lead=0.10, refine_min_saving=0.125, refine_least_saving=2,
              refine_most_steps=None, refine_above=False, secondary_knobs=False, confirm_by_rounds=False,
              figure_windows=False)
MAX_NOISE = 0.15  # a spread this wide is a measurement to repeat: no tolerance follows the noise past it


def pick_tolerance(margin: Optional[float], mode: Mode) -> float:
    """How close to the fastest a cheaper config may be and still be picked: the mode's tolerance,
    never under this run's noise (noise.margin; None: not measured) where the mode says so, nor
    over MIN_GAIN (a small slowdown of the rest of the run)."""
    if not mode.tolerance_follows_noise:
        return mode.pick_tolerance
    return noise_floor(margin, least=mode.pick_tolerance, most=MIN_GAIN)


def refine_tolerance(margin: Optional[float], mode: Mode) -> float:
    """How much slower than the fastest a count may read and still be as good, for the refinement's
    bisection: the pick's tolerance; where the tolerance follows the noise, the noise itself,
    between MIN_GAIN and MAX_NOISE (a count within it cannot be told from the best)."""
    if not mode.tolerance_follows_noise:
        return mode.pick_tolerance
    return noise_floor(margin, least=MIN_GAIN, most=MAX_NOISE)


def cpu_bound(workers: int, workers_cores: Optional[float], runq_cores: Optional[float],
              cpu_cap: int) -> Optional[bool]:
    """Are the CPUs what limits these workers? By the workers' own demand (running, or runnable and
    waiting for a CPU): each would use nearly a core, or together they would fill the usable CPUs.
    Workers that mostly sleep (I/O, handing batches over) leave room: more of them than CPUs can
    fill it, even while the training step keeps the CPUs busy. None: not measured (no workers)."""
    if workers <= 0 or workers_cores is None:
        return None
    demand = workers_cores + (runq_cores or 0.0)
    return demand / workers >= BUSY_WORKER_CORES or demand >= SATURATED_SHARE * max(1, cpu_cap)


def may_pass_cpus(cpu_bound_at: Mapping[int, Optional[bool]], mode: Mode) -> bool:
    """May the search try more workers than the usable CPUs? ``cpu_bound_at``: each measured worker
    count's verdict (cpu_bound; loading_cpu_bound where the loop loads itself). The most workers
    with a verdict decide: while they leave CPU idle (I/O, handing batches over) more can fill it;
    once they are CPU-bound, more only compete (fewer workers reading idle says nothing of more).
    No verdict yet: ``mode.pass_cpus_unmeasured``."""
    bound = cpu_bound_at_most(cpu_bound_at)
    return mode.pass_cpus_unmeasured if bound is None else not bound


def cpu_bound_at_most(cpu_bound_at: Mapping[int, Optional[bool]]) -> Optional[bool]:
    """The verdict of the most workers that have one (None: none has)."""
    known = {n: bound for n, bound in cpu_bound_at.items() if bound is not None}
    return known[max(known)] if known else None


def loading_cpu_bound(load_cpu_fraction: Optional[float]) -> Optional[bool]:
    """At 0 workers the loop loads each batch itself: is that loading computing (CPU-bound) rather
    than waiting? The same threshold as for a worker: its share of a core while it loads."""
    if load_cpu_fraction is None:
        return None
    return load_cpu_fraction >= BUSY_WORKER_CORES


def jump_target(workers: int, rate: float, ceiling: float, mode: Mode, job_cores: Optional[float] = None,
                cpu_cap: Optional[int] = None, worker_start_s: Optional[float] = None,
                max_start_s: float = 10.0) -> int:
    """The worker count predicted to reach the ceiling from a config that runs ``workers`` at
    ``rate``: throughput grows with the workers while they are the limit. Capped by what the usable
    CPUs can deliver where the job's own CPU per batch is known, and by how fast workers start
    (spawn and forkserver start an interpreter each). At least twice the workers (a doubling)."""
    lanes = max(workers, 1)
    target = ceiling
    if job_cores and cpu_cap:
        target = min(target, rate * cpu_cap / job_cores)
    needed = math.ceil(lanes * target * mode.jump_margin / max(rate, 1e-9) - 1e-9)  # (22.000000001 is 22)
    if worker_start_s:
        needed = min(needed, int(lanes * max_start_s / worker_start_s))
    return max(2 * lanes, needed)


def charge_per_epoch(rate: float, batches_per_epoch: int, extra_s: float) -> float:
    """The rate with what each epoch costs beyond its batches at ``rate`` (workers started anew,
    time between epochs) spread over the epoch's batches: what a whole epoch delivers."""
    return batches_per_epoch / (batches_per_epoch / rate + extra_s)


def supply_per_worker(rate: float, workers: int, loads_in_loop: bool,
                      wait_fraction: Optional[float]) -> float:
    """Batches per second one worker can supply at most, from a config that kept the loop
    waiting: where the loop loads each batch itself (torch's 0 workers, Keras's 1), one over the
    wait per batch (the loading alone: ``rate`` over the wait's share); at n workers, ``rate``
    over n (n workers supplied it, and the loop still waited for them). inf (no bound): the
    loop's wait was not measured (tf.keras, tf.data through fit), or it barely waited (under
    MIN_WAIT_FRACTION), so its rate says nothing of what the workers could supply."""
    if wait_fraction is None or wait_fraction < MIN_WAIT_FRACTION:
        return math.inf
    if not loads_in_loop:
        return rate / max(workers, 1)
    return rate / wait_fraction


def fewest_workers_to_supply(rate: float, per_worker: float) -> Optional[int]:
    """The fewest workers that could supply ``rate`` at ``per_worker`` each: a refinement never
    tries fewer (both searches; a window there is time lost for certain). It assumes a worker
    supplies no more with more workers beside it (they share the CPUs and the storage): a curve
    that rises faster than linearly is not refined below this. None: not known."""
    if per_worker <= 0 or math.isinf(per_worker):
        return None
    return math.ceil(rate / per_worker - 1e-9)


def noise_floor(margin: Optional[float], least: float, most: float) -> float:
    """A tolerance that is never under this run's noise (noise.margin; None: not measured), nor
    under ``least``, nor over ``most``."""
    return min(most, max(least, margin or 0.0))


def pick(evidence: Sequence[ConfigEvidence], cost: Callable[[Config], Any],
         tolerance: float) -> Optional[ConfigEvidence]:
    """THE pick, for both searches and the recommendation: among the configs that did not fail,
    the cheapest within ``tolerance`` of the fastest (then the faster; ties go to the first
    measured)."""
    by_key = {config_key(e.config): e for e in evidence if not e.failed}
    if not by_key:
        return None
    best = max((e.rate or 0.0) for e in by_key.values())
    within = [e for e in by_key.values() if (e.rate or 0.0) >= best * (1 - tolerance)]
    return min(within, key=lambda e: (cost(e.config), -(e.rate or 0.0)))


def fastest(evidence: Sequence[ConfigEvidence]) -> Optional[ConfigEvidence]:
    """The fastest config that did not fail (the first measured among equals)."""
    return max((e for e in evidence if not e.failed), key=lambda e: e.rate or 0.0, default=None)


def caps_workers(kind: str, workers: int, most_workers_ran: int) -> bool:
    """Does a config with ``workers`` that ended so (FAILURE_KINDS) rule out every config with as
    many workers? A kill, or memory measured over the budget: yes, whatever ran before (memory
    grows as a run goes on: what ran well earlier says little). A hang, a prediction over the
    budget, an error more workers cause: yes, unless a config with as many workers ran well
    (``most_workers_ran``: a deeper prefetch past the open-file limit, say, rules out that config
    alone). Any other error raised loading a batch: that config alone."""
    if kind not in FAILURE_KINDS:
        raise ValueError(f"not a failure kind: {kind!r} (rules.FAILURE_KINDS)")
    if kind in ("killed", "memory"):
        return True
    return kind in ("rejected", "hung", "worker_hazard") and workers > most_workers_ran
