"""Ray Train jobs: a script whose ``TorchTrainer`` runs its training function in
Ray's worker processes, started by the script's own ``ray.init()`` (a GCS, a
raylet, a controller, one worker process per training worker), not as children
of the script itself.

NOTE [ A Ray Train job's ranks ]

    jobrunner: python train_ray.py (the driver) with FEEDPROF_JOB_SPEC, the bootstrap on PYTHONPATH,
               FEEDPROF_RAY_DRIVER (every other Python process Ray starts skips the bootstrap)
      driver (sitecustomize ─► hosted.maybe_host ─► in_driver): never a rank, two hooks:
        ray.init(...) returns without a GCS of its own ─► it joined a running cluster:
            ray-driver.json says so (the job is out of reach; jobrunner says what to run instead)
        TorchTrainer(train_loop_per_worker=fn) ─► HostedLoop(fn, the job's spec) in fn's place
      ray.init ─► GCS, raylet ─► Ray's worker processes (the driver's descendants, each its own group)
        a training worker calls HostedLoop ─► its rank from ray.train.get_context() (world rank,
            local rank, node rank) and its CPUs from what Ray reserved for it ─► rank_host.host_rank:
            a Controller, the adapters, events and result per rank, as a torchrun rank has
          (a worker not below the driver is a running cluster's, joined without ray.init seeing
            it: said in ray-driver.json, not measured)
        the controller actor, Ray's daemons and idle workers never call it: never ranks
      jobrunner ends the job as any other: the driver's group and every descendant of it

Nothing here imports ray: the hooks run once the script has imported it, and
HostedLoop only runs inside Ray's own worker processes.
"""
from __future__ import annotations

import ast
import atexit
import functools
import inspect
import json
import os
import socket
from typing import Any, Callable, Dict, List, Optional

from feedprof.store import RankInfo, TrialState
from feedprof.store.reasons import Interrupted, RayClusterJoined, ScriptFailed
from feedprof.trial.protocol import TrialSpec
from feedprof.trial.rank_host import host_rank
from feedprof.trial.controller import Controller
from types import ModuleType

RAY_LAUNCHER = "ray"
DRIVER_FILE = "ray-driver.json"  # in the trial directory: what the driver found (a cluster it joined)
# The driver's script, for the bootstrap: every other Python process Ray starts (a dozen or more: its
# daemons, agents, idle workers) skips feedprof altogether, instead of importing it to find it is no rank.
DRIVER_ENV = "FEEDPROF_RAY_DRIVER"
_GCS_NAMES = ("gcs_server",)


def runs_ray_train(path: str) -> bool:
    """Does the script import Ray Train (``import ray.train``, ``from ray.train.torch import
    TorchTrainer``, ``from ray import train``, or ``ray.train`` used after ``import ray``)?
    Read, not run."""
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return False
    return any(_names_ray_train(node) for node in ast.walk(tree))


def _names_ray_train(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name == "ray.train" or a.name.startswith("ray.train.") for a in node.names)
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        module = node.module
        return module == "ray.train" or module.startswith("ray.train.") or (
            module == "ray" and any(a.name == "train" for a in node.names))
    return isinstance(node, ast.Attribute) and node.attr == "train" and isinstance(node.value, ast.Name) \
        and node.value.id == "ray"


# -------------------------------------------------------------- the driver


def job_env(launcher: str, script: Optional[str]) -> Dict[str, str]:
    """What a Ray Train job's processes get beside a job's environment (jobrunner.py)."""
    return {DRIVER_ENV: script} if launcher == RAY_LAUNCHER and script else {}


def in_driver(spec_path: str) -> None:
    """The script's own process: watch what it asks of Ray (post-import hooks, nothing imported)."""
    from feedprof.frameworks import hooks

    trial_dir = os.path.dirname(os.path.abspath(spec_path))
    hooks.when_imported("ray", lambda ray: _watch_init(ray, trial_dir))
    hooks.when_imported("ray.train.torch", lambda module: _wrap_trainer(module, spec_path))


_joined: List[str] = []  # the address of a running cluster the driver joined (its workers are not ours)


def _watch_init(ray: ModuleType, trial_dir: str) -> None:
    original = getattr(ray, "init", None)
    if original is None or getattr(original, "_feedprof_wrapped", False):
        return

    @functools.wraps(original)
    def init(*args: Any, **kwargs: Any) -> Any:
        context = original(*args, **kwargs)
        if not _started_here():  # Ray was already running: its workers are that cluster's
            address = str(kwargs.get("address") or (args[0] if args else "") or os.environ.get("RAY_ADDRESS", ""))
            _joined.append(address or "auto")
            _say_joined(trial_dir, _joined[0])
        return context

    init._feedprof_wrapped = True  # type: ignore[attr-defined]
    ray.init = init


def _started_here() -> bool:
    """Did this process start the Ray it is connected to (its GCS is a child of ours)?"""
    import psutil

    try:
        return any(p.name().startswith(_GCS_NAMES) for p in psutil.Process().children())
    except psutil.Error:
        return True  # cannot tell: as a local Ray, the common case


def _say_joined(trial_dir: str, address: str) -> None:
    from feedprof.store.codec import write_text_atomic

    write_text_atomic(os.path.join(trial_dir, DRIVER_FILE), json.dumps({"joined": address}))


def driver_notes(trial_dir: str) -> tuple:
    """What the driver of a Ray job said (a cluster it joined), as findings of the job's run."""
    try:
        with open(os.path.join(trial_dir, DRIVER_FILE), encoding="utf-8") as fh:
            said = json.load(fh)
    except (OSError, ValueError):
        return ()
    return (RayClusterJoined(address=str(said.get("joined", ""))),) if said.get("joined") else ()


def _wrap_trainer(module: ModuleType, spec_path: str) -> None:
    """Every Ray trainer built on the class that takes ``train_loop_per_worker`` (TorchTrainer's
    base) gets the training function wrapped: the wrapper is what Ray pickles to its workers."""
    base = _takes_the_loop(getattr(module, "TorchTrainer", None))
    if base is None or base.__dict__.get("_feedprof_patched", False):
        return
    original = base.__init__
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:  # Ray's own error, as written
            return original(self, *args, **kwargs)
        loop = bound.arguments.get("train_loop_per_worker")
        if callable(loop) and not isinstance(loop, HostedLoop) and not _joined:
            bound.arguments["train_loop_per_worker"] = HostedLoop(loop, spec_path, os.getpid())
        original(*bound.args, **bound.kwargs)

    base.__init__ = __init__
    base._feedprof_patched = True


def _takes_the_loop(cls: type) -> type:
    """The most basic class of ``cls`` whose own ``__init__`` takes ``train_loop_per_worker``."""
    found = None
    for klass in getattr(cls, "__mro__", ()):
        init = klass.__dict__.get("__init__")
        try:
            if init is not None and "train_loop_per_worker" in inspect.signature(init).parameters:
                found = klass
        except (TypeError, ValueError):
            continue
    return found


# ---------------------------------------------------------- a training worker


class HostedLoop:
    """The script's training function, run as a rank of the job in the Ray worker that calls it.
    Its signature is the function's (``__wrapped__``): Ray passes the config as it would."""

    def __init__(self, loop: Callable[..., Any], spec_path: str, driver_pid: int = 0):
        functools.update_wrapper(self, loop)
        self.loop, self.spec_path, self.driver_pid = loop, spec_path, driver_pid

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        ctl = host_worker(self.spec_path, self.driver_pid)
        if ctl is None:
            return self.loop(*args, **kwargs)
        try:
            out = self.loop(*args, **kwargs)
        except BaseException as exc:
            _failed(ctl, exc)
            raise
        if not ctl.result_written:
            ctl.write_result(TrialState.OK, exit_code=0)
        return out


_hosted: List[Controller] = []  # this process's controller, once it is a rank (Ray may call the loop again)


def host_worker(spec_path: str, driver_pid: int = 0) -> Optional[Controller]:
    """This Ray worker as the rank Ray Train says it is (None: not a job feedprof runs here)."""
    if _hosted:
        return _hosted[0]
    if not os.path.isfile(spec_path):  # another machine: nothing of the job's to write to
        return None
    if driver_pid and not _below(driver_pid):  # a running cluster's worker (Ray joined on its own, e.g. at fit())
        _say_joined(os.path.dirname(os.path.abspath(spec_path)), "auto")
        return None
    with open(spec_path, encoding="utf-8") as fh:
        spec = TrialSpec.from_json(fh.read())
    ctl, _ = host_rank(spec, ray_rank(), spec.script, script_argv(spec))  # (a Ray worker: feedprof's node)
    _hosted.append(ctl)
    atexit.register(_interrupted, ctl)  # Ray ends a worker with SystemExit on SIGTERM
    return ctl


def _below(driver_pid: int) -> bool:
    """Is this process the driver, or started under it (by the Ray its ray.init() started)?"""
    import psutil

    try:
        return os.getpid() == driver_pid or any(p.pid == driver_pid for p in psutil.Process().parents())
    except psutil.Error:
        return True  # cannot tell: measured, as the common case


def ray_rank() -> RankInfo:
    """Which rank Ray Train made this worker, and the CPUs Ray reserved for it."""
    import ray
    import ray.train

    ctx = ray.train.get_context()
    reserved = ray.get_runtime_context().get_assigned_resources().get("CPU")
    return RankInfo(rank=ctx.get_world_rank(), local_rank=ctx.get_local_rank(), world_size=ctx.get_world_size(),
                    local_world_size=ctx.get_local_world_size(), launcher=RAY_LAUNCHER, node=socket.gethostname(),
                    node_rank=ctx.get_node_rank(), pid=os.getpid(), cpus=reserved_cpus(reserved))


def reserved_cpus(reserved: Optional[float]) -> Optional[int]:
    """Whole CPUs of a Ray reservation (0.5 CPU is one to a loader); None where it reserved none."""
    return max(1, int(reserved)) if reserved else None


def script_argv(spec: TrialSpec) -> List[str]:
    """The script's own arguments in the job's command (``python train.py --epochs 3``), read in a
    Ray worker, whose working directory is Ray's own: the script's word is matched by its name."""
    words, name = list(spec.argv), os.path.basename(spec.script)
    at = next((i for i, w in enumerate(words) if w.endswith(".py") and os.path.basename(w) == name), None)
    return words[at + 1:] if at is not None else []


def _failed(ctl: Controller, exc: BaseException) -> None:
    """The training function raised: its traceback is the rank's, unless its window was
    written already (the job's end, from another rank's window, breaks its collectives)."""
    from feedprof.record.userframes import failure_hint, script_traceback

    if ctl.result_written:
        return
    ctl.emit("failed")
    ctl.write_result(TrialState.FAILED, ScriptFailed(error=f"{type(exc).__name__}: {exc}".strip(),
                                                     hint=failure_hint(exc)), tb=script_traceback(exc), exit_code=1)


def _interrupted(ctl: Controller) -> None:
    if not ctl.result_written:
        ctl.write_result(TrialState.INTERRUPTED, Interrupted(), exit_code=143)

