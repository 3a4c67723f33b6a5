"""What recommend() reads of a search (analyse/recommend.py): each config's evidence
(store/evidence.py), and what only the search's own records hold, asked through ``Measurements``.
Offline the records are isolated trials (analyse/from_trials.py TrialMeasurements); online they are
the real run's windows and failures (tune/online_result.py RunMeasurements).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Protocol, Tuple

from feedprof.store.reasons import CheaperWithinNoise, Reason, Verdict, WorkersCapped
from feedprof.store import BatchTime, ConfigEvidence, LoadingProfile, TrialState

Config = Dict[str, Any]


@dataclass(frozen=True)
class Baseline:
    """The script's own settings, as its search ended them."""

    config: Config
    state: TrialState = TrialState.OK  # offline its trial's; online the run's at those settings
    cause: Optional[Reason] = None  # why they failed, where they did
    wait_fraction: Optional[float] = None  # the loop's data wait at them


@dataclass(frozen=True)
class CpuUse:
    """A config's CPU, as the cores each part of the job used."""

    workers_cores: Optional[float]  # the worker processes'
    main_cores: Optional[float] = None  # the training process's (thread workers run in it)
    other_cores: Optional[float] = None  # other processes' on the machine
    runq_cores: Optional[float] = None  # the workers' wait for a CPU, in cores


class Measurements(Protocol):
    """What a search measured, as recommend() reads it: each config's evidence, and what only the
    search's own records hold. Offline: analyse/from_trials.py TrialMeasurements (isolated
    trials); online: tune/online_result.py RunMeasurements (the real run's windows)."""

    baseline: Optional[Baseline]
    # the most workers that are safe, and why (offline analyse/limits.py; online rules.caps_workers)
    cap: Optional[WorkersCapped]
    ceiling: Optional[float]  # the compute ceiling, batches/s (None: not measured)

    def configs(self) -> List[ConfigEvidence]:
        """Every config that may be picked (within the cap, never failed), first measured first."""

    def tried_a_setting(self) -> bool:
        """Did any loader setting run beside the script's own?"""

    def cheaper_within_noise(self, chosen: ConfigEvidence,
                             cost: Any) -> Optional[Tuple[ConfigEvidence, CheaperWithinNoise]]:
        """A cheaper config ``chosen`` cannot be told apart from on this run's noise (offline: the
        spread of repeated trials; online the pick's tolerance is already the run's noise)."""

    def finalize(self, chosen: ConfigEvidence, tol: float) -> Tuple[Config, List[Reason]]:
        """The config to recommend for ``chosen``, with settings judged rather than measured."""

    def repeats(self, chosen: ConfigEvidence) -> int:
        """How many times ``chosen`` was measured apart (offline trials; online one stretch)."""

    def cpu(self, chosen: ConfigEvidence) -> Tuple[Optional[bool], Optional[CpuUse]]:
        """(are the CPUs what limits its workers: rules.cpu_bound, its CPU use)."""

    def memory_saved_bytes(self, chosen: ConfigEvidence) -> Optional[int]:
        """The memory ``chosen`` saves over the script's own settings (None: not measured)."""

    def trainer_advice(self, verdict: Verdict) -> Optional[Reason]:
        """A trainer's own advice on the loader, against what was measured."""

    def hazards(self, chosen: ConfigEvidence, config: Config, ram_budget_bytes: Optional[int]) -> List[Reason]:
        """What the recommended config still risks."""

    def batch_times(self, chosen: ConfigEvidence) -> Tuple[BatchTime, ...]:
        """Where a batch's time goes (analyse/batch_time.py) for the script's own settings, ``chosen``
        and the compute ceiling, each where it was measured."""

    def loading(self, chosen: ConfigEvidence) -> Optional[LoadingProfile]:
        """Where ``chosen``'s loading code spent its time (None: not profiled)."""
