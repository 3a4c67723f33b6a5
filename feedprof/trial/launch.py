"""The user's own launch command (``feedprof tune -- torchrun ... train.py``):
what launches the ranks, and which script they run.

The command is run unchanged; feedprof only adds to its environment (see
jobrunner.py): its bootstrap directory first on PYTHONPATH, so that every
rank is instrumented (bootstrap/sitecustomize.py), and a fresh rendezvous port.
"""
from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from feedprof.trial.ray_train import RAY_LAUNCHER, runs_ray_train

_LAUNCHER_MODULES = {"torch.distributed.run": "torchrun", "torch.distributed.launch": "torch.distributed.launch"}
_LAUNCHER_COMMANDS = {"torchrun": "torchrun", "mpirun": "mpi", "mpiexec": "mpi", "horovodrun": "horovod",
                      "srun": "slurm", "accelerate": "accelerate"}


class LaunchError(ValueError):
    """A launch command that cannot run (exit code 2)."""


@dataclass(frozen=True)
class Launch:
    command: Tuple[str, ...]
    # torchrun | torch.distributed.launch | mpi | horovod | slurm | accelerate | ray | python | shell | other
    launcher: str
    script: Optional[str] = None  # the training script it runs (absolute), where the command names one
    interpreter: Optional[str] = None  # runs the command's "python" (a SCRIPT given to feedprof: its own Python)

    @property
    def distributed(self) -> bool:
        return self.launcher not in ("python",)

    def argv(self) -> Tuple[str, ...]:
        """The command as it is run (``command`` is as the user would type it)."""
        return (self.interpreter,) + self.command[1:] if self.interpreter else self.command


def script_launch(script: str, argv: Sequence[str]) -> Optional[Launch]:
    """A SCRIPT that is a job of its own (None: a plain script, run as one process): a Ray Train
    script, whose ray.init() starts the processes that train (trial/ray_train.py)."""
    if not runs_ray_train(script):
        return None
    return Launch(("python", script, *argv), RAY_LAUNCHER, os.path.abspath(script), interpreter=sys.executable)


def _is_python(word: str) -> bool:
    return os.path.basename(word).startswith("python")


def _first_script(words: Sequence[str]) -> Optional[str]:
    for w in words:
        if w.endswith(".py") and os.path.isfile(w):
            return os.path.abspath(w)
    return None


def parse_launch(argv: Sequence[str]) -> Launch:
    """What ``argv`` launches; LaunchError if its program cannot be found."""
    words = tuple(argv)
    if not words:
        raise LaunchError("nothing to launch after --")
    program = words[0]
    if shutil.which(program) is None and not os.path.isfile(program):
        raise LaunchError(f"no such command: {program}")
    name = os.path.basename(program)
    if _is_python(name):
        if len(words) > 2 and words[1] == "-m":
            return Launch(words, _LAUNCHER_MODULES.get(words[2], "other"), _first_script(words[3:]))
        script = _first_script(words[1:2])
        return Launch(words, RAY_LAUNCHER if script is not None and runs_ray_train(script) else "python", script)
    if name in _LAUNCHER_COMMANDS:
        return Launch(words, _LAUNCHER_COMMANDS[name], _first_script(words[1:]))
    if name.endswith(".sh") or name in ("bash", "sh"):
        return Launch(words, "shell", _first_script(words[1:]))
    return Launch(words, "other", _first_script(words[1:]))
