"""The user's own launch command (``feedprof tune -- torchrun ... train.py``):
what launches the ranks, and which script they run.

The command is run unchanged; feedprof only adds to its environment (see
jobrunner.py): its bootstrap directory first on PYTHONPATH, so that every
rank is instrumented (bootstrap/sitecustomize.py), and a fresh rendezvous port.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

_LAUNCHER_MODULES = {"torch.distributed.run": "torchrun", "torch.distributed.launch": "torch.distributed.launch"}
_LAUNCHER_COMMANDS = {"torchrun": "torchrun", "mpirun": "mpi", "mpiexec": "mpi", "horovodrun": "horovod",
                      "srun": "slurm", "accelerate": "accelerate"}


class LaunchError(ValueError):
    """A launch command that cannot run (exit code 2)."""


@dataclass(frozen=True)
class Launch:
    command: Tuple[str, ...]
    launcher: str  # torchrun | torch.distributed.launch | mpi | horovod | slurm | accelerate | python | shell | other
    script: Optional[str] = None  # the training script it runs (absolute), where the command names one

    @property
    def distributed(self) -> bool:
        return self.launcher not in ("python",)


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
        return Launch(words, "python", _first_script(words[1:2]))
    if name in _LAUNCHER_COMMANDS:
        return Launch(words, _LAUNCHER_COMMANDS[name], _first_script(words[1:]))
    if name.endswith(".sh") or name in ("bash", "sh"):
        return Launch(words, "shell", _first_script(words[1:]))
    return Launch(words, "other", _first_script(words[1:]))
