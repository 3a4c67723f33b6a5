"""The fixed vocabularies of feedprof's records: each is an enum whose members
are their JSON strings (``Role.SEARCH == "search"``, ``f"{Role.SEARCH}"`` is
"search"), so files stay plain and code stays typed. store.py re-exports them."""
from __future__ import annotations

from enum import Enum


class Code(str, Enum):
    """An enum whose members are their JSON strings (``f"{Role.SEARCH}"`` is "search")."""

    __str__ = str.__str__
    __format__ = str.__format__


class Role(Code):
    """Why a trial ran."""

    BASELINE = "baseline"  # the script's own settings
    CEILING = "ceiling"  # one cached batch replayed: the most any loader can reach
    SEARCH = "search"  # a config the strategy proposed
    CONFIRM = "confirm"  # a config measured again, because a rival was within noise


class Phase(Code):
    """Which step of the search proposed a trial (strategy.py)."""

    BASELINE = "baseline"
    CEILING = "ceiling"
    LADDER = "ladder"
    REFINE = "refine"
    SECONDARY = "secondary"
    CONFIRM = "confirm"
    GRID = "grid"
    SEARCH = "search"  # files of schema version 1 did not say which


class TrialState(Code):
    OK = "ok"
    FAILED = "failed"  # the script raised, or exited with an error
    TIMEOUT = "timeout"
    KILLED = "killed"  # by a signal: the OOM killer, a bus error (/dev/shm)
    REJECTED = "rejected"  # predicted over budget, never run
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM to feedprof


class GpuStatus(Code):
    OK = "ok"
    OFF = "off"  # sampling turned off
    NO_PYNVML = "no_pynvml"  # nvidia-ml-py is not installed
    NO_LIBRARY = "no_library"  # no NVML library: no NVIDIA driver here
    NO_DRIVER = "no_driver"  # the driver is not loaded
    NVML_ERROR = "nvml_error"
    NO_GPU = "no_gpu"
    ALL_HIDDEN = "all_hidden"  # CUDA_VISIBLE_DEVICES hides every GPU
    UNKNOWN = "unknown"


class WindowEnd(Code):
    """What ended the measured window."""

    NONE = ""
    BATCHES = "batches"  # --window-batches were measured
    SECONDS = "seconds"  # --window-seconds passed (with enough batches)
    SCRIPT_ENDED = "script_ended"  # before the window was full
    FULL_RUN = "full_run"  # --full, or feedprof.profile()
    NO_LOADER = "no_loader"
    NO_RESULT = "no_result"  # the trial process wrote nothing
