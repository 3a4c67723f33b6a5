"""The fixed vocabularies of feedprof's records: each is an enum whose members
are their JSON strings (``Role.SEARCH == "search"``, ``f"{Role.SEARCH}"`` is
"search"), so files stay plain and code stays typed. ``feedprof.store`` re-exports them."""
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
    CONFIRM = "confirm"  # measured again: a rival was within noise, or for the figures reported
    PROBE = "probe"  # measured and reported, never recommended (in_order=False without --allow-reorder)


class Phase(Code):
    """Which step of the search proposed a trial (strategy.py)."""

    BASELINE = "baseline"
    CEILING = "ceiling"
    LADDER = "ladder"
    REFINE = "refine"
    SECONDARY = "secondary"
    CONFIRM = "confirm"  # the pick and its closest rival, interleaved
    REPORT = "report"  # the pick measured after it was chosen, and the script's own beside it: the figures
    GRID = "grid"
    SEARCH = "search"  # no step of the search says which (an online window no step asked for)


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


class Framework(Code):
    """Whose loader it is: the adapter in frameworks/ that finds it and sets its knobs."""

    NONE = ""  # no loader found
    TORCH = "torch"  # torch.utils.data.DataLoader (and torchdata's StatefulDataLoader)
    KERAS = "keras"  # Keras 3 PyDataset
    TF_KERAS = "tf.keras"  # legacy Keras 2 (tf_keras) fit(...)
    TF_DATA = "tf.data"
    TORCHDATA_NODES = "torchdata.nodes"
    RAY_DATA = "ray.data"  # Ray Data's iter_torch_batches (frameworks/ray_data.py)
    ITERABLE = "iterable"  # any iterable passed to watch(): timed, no knobs


class SwitchAt(Code):
    """Where a loader's settings change inside the real run (``feedprof tune --online``;
    frameworks/contract.Switcher): the mode each loader was handled in."""

    BATCH = "mid_epoch"  # at a batch boundary: the epoch's order kept, what was in flight fetched again
    EPOCH = "epoch"  # only between epochs (an IterableDataset: the worker count decides its sharding)
    NONE = "none"  # observed, never switched (why_not says why)
    FOLLOWS = "follows"  # another loader that took the tuned loader's config (it waited too)


class RunKind(Code):
    """How a run was taken."""

    PROFILE = "profile"  # feedprof profile: one observed run of the script's own settings
    TRIAL = "trial"  # one trial of a tune
    RANK = "rank"  # one rank of a multi-process job's run
    CONTEXT = "context"  # feedprof.profile() inside the user's own process
    ONLINE = "online"  # feedprof tune --online: the real run, its loader tuned as it trained
    ATTACHED = "attached"  # feedprof attach PID: a job it did not start, sampled from outside (not timed)


class InputBound(Code):
    """The TensorFlow Profiler's classes of input-bound (analyse/diagnose.py: classify)."""

    HIGHLY = "highly"  # 20 % or more of the time waiting for data
    MODERATELY = "moderately"  # 5 % or more
    NOT = "not"
    UNKNOWN = "unknown"  # not measured


class VerdictKind(Code):
    """What a recommendation's headline says (analyse/recommend.py: verdict_of)."""

    NONE = ""
    FASTER = "faster"  # a config beats the script's own settings
    CHEAPER = "cheaper"  # as fast as the script's own, for less
    FEWER_WORKERS = "fewer_workers"  # the loader is not the limit and fewer workers do as well
    NOT_LOADER = "not_loader"  # near the compute ceiling already
    NO_BETTER = "no_better"  # input-bound, yet nothing tried beats the script's own settings
    NOTHING_TRIED = "nothing_tried"  # the tune stopped before any loader setting was tried (reasons.NothingTried)
    PREDICTED = "predicted"  # a held loader: the count its own settings' wait predicts, not measured
    DUPLICATES = "duplicates"  # more workers repeat the data: at most one
    SURVIVES = "survives"  # the script's own settings were killed or failed: the best config that ran


class LineProblem(Code):
    """Why a paste line failed the check before it was shown (frameworks/paste_check.py)."""

    NONE = ""
    DOES_NOT_PARSE = "does_not_parse"  # not Python (a statement), or not shell words (a command line)
    KEYWORD_TWICE = "keyword_twice"  # a call would get a keyword twice (by name and in a ** splat)
    KEYWORD_MAYBE_TWICE = "keyword_maybe_twice"  # a keyword added beside a ** splat feedprof cannot read
    FLAG_TWICE = "flag_twice"  # a command line gives one of the script's flags twice
    UNCHANGED = "unchanged"  # the line is the script's own: nothing to paste


class PoolRole(Code):
    """Which processes held a thread pool (store/pools.py)."""

    WORKER = "worker"  # a loader's worker process (DataLoader worker, a PyDataset process)
    TRAINING = "training"  # the training process (its loop, and its loading at 0 workers)
