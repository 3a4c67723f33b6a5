"""What every search strategy shares: the proposal it makes, the protocol
the tuner asks it through, and the history of trials it decides from (a
strategy keeps nothing else, so resuming is telling the saved trials again).
GridStrategy, the simplest strategy, lives here too; the ladder is in
strategy.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Protocol, Sequence

from feedprof.analyse.measured import score, sound
from feedprof.store.reasons import Reason
from feedprof.store import Phase, Role, Trial, TrialState
from feedprof.tune.space import Config, Space


@dataclass
class Proposal:
    config: Config
    role: Role
    phase: Phase
    overrides: Dict[str, Any] = field(default_factory=dict)  # trial option overrides (runner.TrialOptions)
    optional: bool = False  # only if the budget allows it: the tune is complete without it


class Strategy(Protocol):
    """What the tuner needs of a search strategy."""

    def tell(self, trial: Trial) -> None:
        """Record a trial (measured, failed or rejected)."""

    def ask(self) -> Optional[Proposal]:
        """The next config to measure, from the trials told so far; None: done."""

    @property
    def notes(self) -> List[Reason]:
        """How the search went, as of the last ask."""


def in_phases(trial: Trial, phases: Iterable[Phase]) -> bool:
    return trial.phase in phases


class TrialHistory:
    """The trials told so far, and the questions every strategy asks of them (the online search's
    is tune/online_strategy.py RunHistory, of the real run's windows)."""

    def __init__(self, space: Space):
        self.space = space
        self.trials: List[Trial] = []
        self._notes: List[Reason] = []

    def tell(self, trial: Trial) -> None:
        self.trials.append(trial)

    @property
    def notes(self) -> List[Reason]:
        return list(self._notes)

    def of(self, *phases: Phase) -> List[Trial]:
        return [t for t in self.trials if in_phases(t, phases)]

    def same_as(self, trial: Trial) -> List[Trial]:
        """Every trial of ``trial``'s config in its role (it, and any repeats)."""
        key = self.space.key(trial.config)
        return [t for t in self.trials if t.role == trial.role and self.space.key(t.config) == key]

    def first_of_each(self) -> List[Trial]:
        """The first measured trial of each config in each role (confirmations aside)."""
        firsts: Dict[tuple, Trial] = {}
        for t in self.trials:
            if t.role != Role.CONFIRM and t.state == TrialState.OK:
                firsts.setdefault((t.role, self.space.key(t.config)), t)
        return list(firsts.values())

    def measured(self, config: Config, trials: Sequence[Trial]) -> Optional[Trial]:
        """The trial of ``config`` among ``trials`` that is believed, whatever its
        state: the last one whose window did not spread, else the first."""
        key = self.space.key(config)
        of = [t for t in trials if t.role != Role.CEILING and self.space.key(t.config) == key]
        return next((t for t in reversed(of) if t.state == TrialState.OK and sound(t)), of[0] if of else None)


def ok_trials(trials: Sequence[Trial]) -> List[Trial]:
    return [t for t in trials if t.role != Role.CEILING and t.state == TrialState.OK and score(t) is not None]


class GridStrategy(TrialHistory):
    """Every config of a fixed list, in order, each measured once (no ceiling)."""

    def __init__(self, space: Space, configs: Iterable[Config]):
        super().__init__(space)
        self.configs = [space.legalize(dict(c)) for c in configs]

    def ask(self) -> Optional[Proposal]:
        done = self.of(Phase.GRID, Phase.BASELINE)
        for config in self.configs:
            if self.measured(config, done) is None:
                return Proposal(config, Role.SEARCH, Phase.GRID)
        return None
