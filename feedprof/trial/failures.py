"""What a failed trial died of, told from its error or its output: the known
ways more loader workers break a script, each a finding with its fix
(render/words/), instead of a raw traceback.

    the script's exception (child.py) ─► failure_cause ─► CudaInForkedWorker,
                                                          TooManyOpenFiles or ScriptFailed
    its error text + output tail (runner.py) ─► cause_of_text ─► killed by the kernel
                                                                 (SIGKILL / SIGBUS), EMFILE
The figures these causes carry (PSS, /dev/shm, open files) are added by the
runner from the trial's samples (ending.with_figures).
"""
from __future__ import annotations

from typing import Optional, Tuple

from feedprof.store.codes import TrialState
from feedprof.store.reasons import (CudaInForkedWorker, OutOfMemoryKilled, Reason, ScriptFailed, SharedMemoryExhausted,
                              TooManyOpenFiles)
from feedprof.record.userframes import failure_hint

CUDA_IN_FORK = "Cannot re-initialize CUDA in forked subprocess"
# EMFILE as Python words it, and as PyTorch does when descriptors of shared
# tensors cannot be passed to the main process any more.
TOO_MANY_FILES = ("Too many open files", "received 0 items of ancdata")
# The other way it shows: past the limit the main process cannot take a shared
# tensor's descriptor from a worker (torch's default file_descriptor strategy),
# and multiprocessing's receive of it ends empty with a bare EOFError.
FDS_NOT_RECEIVED = "recvfds"
BUS_ERROR = ("Bus error", "killed by signal: Bus error")
SHM_FULL = "No space left on device"


def _line_with(text: str, needle: str) -> str:
    """The sentence of ``text`` that says ``needle`` (the worker's own error,
    inside the DataLoader's "Caught ... in DataLoader worker process 0" wrapper)."""
    line = next((line.strip() for line in text.splitlines() if needle in line), needle)
    end = line.find(". ", line.find(needle))
    return line if end < 0 else line[:end + 1]


def failure_cause(exc: BaseException) -> Reason:
    """The cause of the script's own exception."""
    error = f"{type(exc).__name__}: {exc}".strip()
    if CUDA_IN_FORK in error:
        return CudaInForkedWorker(error=_line_with(error, CUDA_IN_FORK))
    found = next((n for n in TOO_MANY_FILES if n in error), None)
    if found is not None or getattr(exc, "errno", None) == 24:
        return TooManyOpenFiles(error=_line_with(error, found or "Errno 24"))
    if isinstance(exc, EOFError) and _raised_in(exc, FDS_NOT_RECEIVED):
        return TooManyOpenFiles(error=f"{error} in {FDS_NOT_RECEIVED}")
    return ScriptFailed(error=worker_error(error), hint=failure_hint(exc))


def worker_error(error: str) -> str:
    """PyTorch re-raises a worker's exception with the worker's whole traceback
    in its message ("X: Caught X in DataLoader worker process 0.\nOriginal
    Traceback ...\nX: what"): its last line says what, once (the traceback is
    kept apart, Outcome.traceback)."""
    head, found, tb = error.partition("\nOriginal Traceback")
    last = next((line.strip() for line in reversed(tb.splitlines()) if line.strip()), "")
    if not found or not last:
        return error
    where = head.split("Caught ", 1)[-1].strip().rstrip(".")
    return f"{last} (caught {where})" if head != where else last


def _raised_in(exc: BaseException, function: str) -> bool:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_name == function


def cause_of_text(text: str) -> Optional[Tuple[TrialState, Reason]]:
    """A known way to die, named from an error message or the trial's output."""
    if any(n in text for n in BUS_ERROR) or (SHM_FULL in text and ("shm" in text or "torch_" in text)):
        return TrialState.KILLED, SharedMemoryExhausted(signal="SIGBUS" if "Bus error" in text else "")
    if "killed by signal: Killed" in text:
        return TrialState.KILLED, OutOfMemoryKilled(signal="SIGKILL")
    found = next((n for n in TOO_MANY_FILES if n in text), None)
    if found is not None:
        return TrialState.FAILED, TooManyOpenFiles(error=_line_with(text, found))
    if f"in {FDS_NOT_RECEIVED}\n" in text and "\nEOFError" in text:
        return TrialState.FAILED, TooManyOpenFiles(error=f"EOFError: in {FDS_NOT_RECEIVED}")
    if CUDA_IN_FORK in text:
        return TrialState.FAILED, CudaInForkedWorker(error=_line_with(text, CUDA_IN_FORK))
    return None
