"""Whether this process uses CUDA, read from torch if the script loaded it:
never imports torch or initialises CUDA itself (a trial child, a rank, and
``feedprof.profile()`` all ask)."""
from __future__ import annotations

import sys
from typing import Optional


def cuda_in_use() -> Optional[bool]:
    """Whether this process has initialised CUDA through torch (None: torch not loaded)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return bool(torch.cuda.is_initialized())
    except AttributeError:
        return None
