"""The rules both searches decide by, written once: offline (isolated trials, tune/strategy.py and
analyse/recommend.py) and online (stretches of the real run, tune/online_strategy.py) read their
evidence through these, so the two cannot disagree about what is CPU-bound, how far to jump, what
counts as noise or which config to pick.

NOTE [ One decision core ]

    evidence of a config (store/evidence.py ConfigEvidence, from trials or from the run's windows):
    its rate (median of its windows), its windows' rates (the noise), the loop's data wait, the
    workers' CPU (and their wait for a CPU), its start-up, its failures
      ─► cpu_bound ─► may the workers outnumber the CPUs?
      ─► jump_target ─► the worker count predicted to reach the ceiling, within the CPU budget
      ─► capping ─► a kill, memory (a hang: past what ran well): no config with as many workers after it
      ─► pick ─► the cheapest config within tolerance of the fastest (tolerance >= the noise;
                 evidence.pick, for both searches)
    offline: LadderStrategy asks, a trial child measures, the tuner tells (tune/tuner.py)
    online:  the explorer decides between batches of the real run (tune/online.py)

    How the next config is chosen, step by step (the rule, or the Mode field where they differ):

    step        offline: LadderStrategy (trials)          online: decide (windows of the run)
    start       the script's own settings, then one        the script's own settings, min_windows of them;
                batch replayed: the compute ceiling        the ceiling is the step time when data is ready
    climb       rungs 0, 2, 4, 8, ... and a jump to the    a jump to the predicted count     jump_target,
                predicted count                                                              jump_margin
    past CPUs   only while the most workers measured       the same; before any verdict,     may_pass_cpus,
                leave CPU idle; before any verdict, yes    no                                pass_cpus_unmeasured
    stop        near the ceiling; a gain < MIN_GAIN (one   near the ceiling; a gain <        near_ceiling,
                flat rung forgiven while CPU is idle);     MIN_GAIN; the best barely waits;  MIN_GAIN
                a trial that failed                        a larger count measured already
    caps        a kill; past the most workers that ran     a kill, memory over budget; a     caps_workers
                well, a hang, a prediction over budget,    hang past the most workers that
                an error more workers cause                ran well
    refine      the wider gap around the pick, bisected    below the best, bisected          refine_floor_lead,
                (a cheaper count; a peak above)                                              refine_min_saving
                both: never below the fewest workers that could supply the best's rate       fewest_workers_to_supply
    confirm     the pick and its rival, interleaved (one   the pick and the fastest, A B A B
                more round, longer windows, on a busy
                machine: tune/confirm.py)
    noise       noise.margin: the typical spread of one config's measurements, shrunk by their
                count, times z: 1.5 (trials)               1 (windows of the run)            noise_z
    pick        the cheapest within tolerance of the       the same, the tolerance never     pick, noise_floor,
                fastest                                    under the run's noise             pick_tolerance
    advise      analyse/recommend.py recommend_from, one function for both, over each config's evidence
                and what only a search's own records hold (its Measurements):
                a cheaper config the margin cannot tell    none: the tolerance is the        cheaper_within_
                apart from the pick (noise.told_apart)     margin already                    noise

What may differ between offline and online: the fields of ``Mode``, each with its reason
(OFFLINE and ONLINE below). Everything else is one rule.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, Hashable, Mapping, Optional, Sequence, TypeVar

BUSY_WORKER_CORES = 0.9  # a worker that would use this much of a core (running, or waiting for a CPU) computes
SATURATED_SHARE = 0.95  # workers whose demand fills this share of the usable CPUs fill them: more only compete
MIN_GAIN = 0.05  # a climb whose rung gains less over the rungs below is flat (both searches stop climbing)
MIN_WAIT_FRACTION = 0.05  # a loop that waits less than this share of its time is not held back by its loader
# A loop that waits this share of its time is held back by its loader, whatever a compute ceiling
# reads (the TensorFlow Profiler's "highly input-bound"): the ceiling never stops a search alone.
WAITING_ON_LOADER = 0.20
# How a config ended (offline a trial's state and cause, online a failure seen in the run): killed
# (SIGKILL: RAM; SIGBUS: /dev/shm), memory (the job measured over the memory budget: online),
# rejected (predicted over the budget before it ran: offline), hung (no batch in time),
# worker_hazard (an error more workers cause: too many open files, CUDA in a forked worker;
# offline), error (any other error raised loading a batch)
FAILURE_KINDS = ("killed", "memory", "rejected", "hung", "worker_hazard", "error")

T = TypeVar("T")


@dataclass(frozen=True)
class Mode:
    """Where offline and online must decide differently, and why. (What each can measure differs
    too, outside these rules: the compute ceiling. Offline a trial replays one cached batch, so the
    loader costs nothing; online a replayed batch would train the model on repeated data, so the
    step time when data is ready, a window's wall time less its data wait, stands in for it.)"""

    name: str
    # How close to the fastest a cheaper config may be and still be picked. Offline a trial costs
    # only itself and its figure is measured again after it is chosen: 3 %. Online the rest of the
    # real run pays any slowdown, and no config is measured again afterwards: the same 3 %, but
    # never less than the run's own noise (an online window is 0.5 s, a trial's 2 s).
    pick_tolerance: float
    # How far past the predicted count a jump reaches. Offline the ladder's next rung comes
    # cheaply, so it aims at the count itself (less the tolerance). Online every window at too few
    # workers is real training time lost, so it aims 10 % past it, and refines down afterwards.
    jump_margin: float
    # The share of the ceiling at which the climb stops: the loader feeds the step. Offline, within
    # the pick tolerance (1 - the tolerance, which --tolerance sets: the ladder reads its own): a
    # ceiling trial is the step on a replayed batch. Online the ceiling, the step time when data is
    # ready, leaves out handing a batch over, so a fed loop reads a few per cent under it: 10 %.
    near_ceiling: float
    # Windows per config before it is judged. Offline a trial's window is split into chunks;
    # online a config is judged on whole windows of the run (0.5 s each, on every rank).
    min_windows: int
    # How much slower than the best a measured count must read to bound the refinement from below
    # (the counts under it are not tried). Offline, any count below the pick: the pick is the
    # cheapest within tolerance, and a trial's 2 s window, read in chunks, is measured again where
    # rivals are close. Online a config is judged on two 0.5 s windows that read ±6-7 % each on a
    # shared machine: a lead under 10 % may be noise, so the counts below it are still tried
    # (ddp_io: 22 workers read 8 % under 32, and the independent harness found 8 faster than both).
    refine_floor_lead: float
    # The least share of the workers a refinement step must save to be tried, of the cheapest count
    # already within noise of the best. Offline (0, not read) the ladder bisects to any count below
    # the pick, its trials bounded by MAX_REFINE. Online each step runs the real job on fewer
    # workers for two windows: only where it saves an eighth (and at least 2 workers). (Neither
    # goes below the fewest workers that could supply the best's rate: fewest_workers_to_supply.)
    refine_min_saving: float
    # May the workers outnumber the CPUs before any config's CPU use says whether they leave it
    # idle (may_pass_cpus)? Offline, yes: a rung past them is one short trial, and the ladder
    # stops at the first that gains too little. Online, no: a window at too many CPU-bound
    # workers is real training time spent competing for the CPUs.
    pass_cpus_unmeasured: bool
    # How many typical spreads (noise.margin: shrunk by the measurements behind each rate) two
    # configs' rates must differ by to be told apart. Offline a cheaper config replaces a faster
    # one it cannot be told apart from, on two or three trials each: a measured lead is given up
    # only inside 1.5 of them. Online the margin is the least pick tolerance, between the
    # tolerance and MIN_GAIN (never more than a small slowdown of the rest of the run): 1.
    noise_z: float


OFFLINE = Mode(name="offline", pick_tolerance=0.03, jump_margin=0.97, near_ceiling=0.97, min_windows=1,
               refine_floor_lead=0.0, refine_min_saving=0.0, pass_cpus_unmeasured=True, noise_z=1.5)
ONLINE = Mode(name="online", pick_tolerance=0.03, jump_margin=1.10, near_ceiling=0.90, min_windows=2,
              refine_floor_lead=0.10, refine_min_saving=0.125, pass_cpus_unmeasured=False,
              noise_z=1.0)


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


def pick(rates: Dict[Hashable, float], cost: Callable[[Hashable], tuple], tolerance: float) -> Optional[Hashable]:
    """Among configs within ``tolerance`` of the fastest, the cheapest (then the faster)."""
    if not rates:
        return None
    best = max(rates.values())
    within = [k for k, r in rates.items() if r >= best * (1 - tolerance)]
    return min(within, key=lambda k: (cost(k), -rates[k]))


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
