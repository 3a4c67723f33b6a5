"""A process's command line on a terminal: printable, cut to a width, its program named without
its directory (render/gpus.py and render/leftovers.py list processes so)."""
from __future__ import annotations

import os
import shlex
from typing import Optional

COMMAND_WIDTH = 60  # of the command as shown: its program's name and its arguments


def cut(text: str, width: Optional[int]) -> str:
    """``text`` in at most ``width`` columns (None: any length), with control
    characters shown as "?": a process's command line is anyone's to write,
    escape sequences included."""
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    if width is None or len(text) <= width:
        return text
    return text[:max(0, width - 1)] + "…"


def short_command(command: str, width: Optional[int] = COMMAND_WIDTH) -> str:
    """A command line as a person tells processes apart: the program's name
    without its directory (a virtual environment's long path, cut mid-way,
    would fill the line and say nothing), then its arguments, in ``width`` columns."""
    try:
        words = shlex.split(command)  # record/gpu_procs.py wrote it with shlex.join
    except ValueError:
        words = []
    if words and os.sep in words[0]:
        command = shlex.join([os.path.basename(words[0])] + words[1:])
    return cut(command, width)
