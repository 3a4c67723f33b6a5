"""What a trial is told: how it is run and bounded (``TrialOptions``) and what
it does to the script's loaders (``Injection``). The tuner and ``feedprof
profile`` fill them in; runner.py and jobrunner.py obey them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from feedprof import defaults
from feedprof.trial.protocol import Mode

# "1" in every process of a run that feedprof ends early (each offline tune trial, `feedprof profile`
# without --full), never in one that runs to its own end (`tune --online`, `profile --full`): a script
# can skip its side effects (tracker runs, checkpoints, e-mails) with `if os.environ.get("FEEDPROF_TRIAL"):`.
# Documented for users (docs/): the name is a contract.
TRIAL_FLAG_ENV = "FEEDPROF_TRIAL"


@dataclass
class TrialOptions:
    """How one trial is run and bounded (everything but the config itself)."""

    window_batches: int = defaults.PROFILE_WINDOW.batches
    window_seconds: float = defaults.PROFILE_WINDOW.seconds
    min_window_batches: int = defaults.PROFILE_WINDOW.min_batches
    warmup_batches: int = defaults.PROFILE_WINDOW.warmup_batches
    full: bool = False
    timeout_s: Optional[float] = None  # whole trial
    loader_timeout_s: Optional[float] = defaults.LOADER_TIMEOUT_S  # until the first loader yields a batch
    queue_timeout_s: Optional[float] = None  # how long a Slurm step may wait for resources (None: for ever)
    interval_s: float = defaults.INTERVAL_S
    gpu: bool = True
    capture_output: bool = True  # False: the script's output goes to our terminal
    extra_env: Dict[str, str] = field(default_factory=dict)
    zygote: Any = None  # a trial.zygote.Zygote to fork the trial from (captured output only)
    peers: Any = None  # a trial.peers.Peers: the other tasks' feedprofs, whose ranks end with this one's

    def script_env(self) -> Dict[str, str]:
        """What the script's processes get beside the environment they inherit:
        ``extra_env``, and TRIAL_FLAG_ENV where feedprof ends the run early."""
        return {**self.extra_env, **({} if self.full else {TRIAL_FLAG_ENV: "1"})}


@dataclass(frozen=True)
class Injection:
    """What the trial does to the script's loaders (the default: nothing)."""

    mode: Mode = Mode.OBSERVE
    config: Dict[str, Any] = field(default_factory=dict)  # knobs (inject, ceiling)
    framework: Optional[str] = None  # the target loader's framework
    chain: Optional[Tuple[str, ...]] = None  # the target loader's call chain
    site: Optional[str] = None  # or its FILE:LINE (--loader)
    allow_rng_change: bool = False  # online: switch a loader whose switch moves the script's random draws
    allow_resharding: bool = False  # online: switch an IterableDataset between epochs (its samples follow the workers)


OBSERVE = Injection()
