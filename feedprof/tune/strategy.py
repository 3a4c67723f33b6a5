"""The offline search's driver: the tuner asks for the next trial, runs it, tells its result
(Optuna's sampler is the model: ``tell`` records, ``ask`` reads the history). The decision is
tune/search.py's, over the trials told so far as evidence (tune/history.py), in the offline Mode.

NOTE [ Search, not grid ]  (LadderStrategy; step by step: tune/search.py, its NOTE)

    baseline (the script's own settings, run by the tuner)
      └► ceiling: one cached batch replayed, so loading costs nothing
          └► ladder 0, 2, 4, 8, ... (and the CPU count) over the primary knob
               stop when: throughput reaches the ceiling (within tolerance)
                          a rung gains less than MIN_GAIN over the rungs below
                            (the first such rung is forgiven while the loop
                            still waits and the CPUs have room)
                          the next rung passes the CPU count and the workers are
                            CPU-bound (beyond it only I/O-bound workers pay off)
                          a trial fails, is killed or rejected
          (while the CPUs have room: jump straight to the count predicted to reach
           what the ceiling and the CPU budget allow, instead of doubling)
              └► refine: the wider gap first, bisected: between the pick and the count
                         below it (a cheaper config within tolerance; never below the
                         fewest workers that could supply the fastest's rate), and between
                         the pick and a clearly slower count above it (a peak between)
                  └► secondary knobs at the best config (space.secondary)
                      └► confirm: the pick and its strongest rival within noise are
                           measured again, interleaved; configs are ranked by the
                           median over their trials (run-to-run drift on a shared
                           machine is larger than the spread inside one window)
                      └► figures: one longer window of what will be recommended,
                           measured after it was chosen (the best of several noisy
                           windows reads high: its figure comes from this one), across
                           an epoch boundary where an epoch is short enough to afford it

Before any step: a trial whose window spread (analyse/measured.sound) is a
measurement that failed, and a ladder rung that reads well below a rung
beneath it breaks the curve; either is measured again, in a longer window,
before it decides anything (its spread window is then left out).

Every trial carries the phase that proposed it, and each step reads only the
trials of the phases before it and its own: a trial measured later (a confirm
repeat of a rung) never changes what an earlier step decided.

GridStrategy (history.py) proposes a fixed list of configs in order (the benchmark's grid).
Strategies never run anything: the tuner asks, runs the trial, tells.
"""
from __future__ import annotations

from typing import List, Optional

from feedprof.analyse import rules
from feedprof.analyse.ceiling import read_ceiling
from feedprof.store.reasons import Reason, said_once
from feedprof.tune.history import Proposal, TrialHistory
from feedprof.tune.search import next_step
from feedprof.tune.space import Space


class LadderStrategy(TrialHistory):
    """The offline search, asked and told by the tuner (tune/tuner.py)."""

    def __init__(self, space: Space, tol: float = rules.OFFLINE.pick_tolerance):
        super().__init__(space, tol)
        self.mode = rules.offline_mode(tol)

    def ask(self) -> Optional[Proposal]:
        notes: List[Reason] = []
        failed = read_ceiling(self.trials).failed
        if failed is not None:
            notes.append(failed)
        step = next_step(self, self.mode, notes=notes)
        self._notes = said_once(notes)
        return None if step.final else Proposal.of(step)
