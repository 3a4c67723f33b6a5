"""Which stack frames are the user's: call sites that name a loader
("train.py:54"), and the script's own traceback without feedprof's frames."""
from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from types import FrameType
from typing import List, Optional, Tuple


MAX_CHAIN = 4  # user frames kept per call site
MAX_LIBRARY_FRAMES = 32  # library frames kept between the user's last frame and the loader's construction
_FEEDPROF_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # feedprof/
_NOT_USER = tuple(
    os.path.abspath(p) for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
                                 sysconfig.get_paths()["platlib"], sys.prefix, sys.base_prefix,
                                 sys.exec_prefix, _FEEDPROF_DIR} if p)

# NOTE [ Which files are the user's ]
#
#   a frame's file is the user's when it lies under the script's directory or the
#   working directory (the project the job is run from), and not under the
#   standard library, an installed package (site-packages, dist-packages), the
#   Python prefix (a virtual environment inside the project) or feedprof itself.
#   A package on PYTHONPATH outside both directories is a library: its frames are
#   kept apart ("built in"), so that advice names the user's call into it.


def _under(path: str, root: str) -> bool:
    return root == os.sep or path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def is_user_file(filename: str, script_dir: str = "") -> bool:
    if filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    if path.startswith(_NOT_USER) or "site-packages" in path or "dist-packages" in path:
        return False
    if not script_dir:
        return True
    return _under(path, os.path.abspath(script_dir)) or _under(path, os.getcwd())


def user_call_chain(script_dir: str, frame: Optional[FrameType], direct: bool = False) -> Tuple[str, ...]:
    """Frames of user code from ``frame`` outwards, outermost first, as "file.py:LINE".

    ``direct``: only if ``frame`` itself is user code (else ``()``), so that
    framework code running on the user's behalf is told apart.
    """
    if direct and (frame is None or not is_user_file(frame.f_code.co_filename, script_dir)):
        return ()
    sites: List[str] = []
    while frame is not None and len(sites) < MAX_CHAIN:
        fn = frame.f_code.co_filename
        if is_user_file(fn, script_dir):
            sites.append(f"{display_path(fn, script_dir)}:{frame.f_lineno}")
        frame = frame.f_back
    return tuple(reversed(sites))


def library_frames(script_dir: str, frame: Optional[FrameType]) -> Tuple[str, ...]:
    """The frames outside the user's files from ``frame`` out to the user's
    innermost frame (a library helper that builds the loader), outermost first,
    as absolute "path:LINE"; ``()`` where the user's code builds it directly or
    no user frame calls in (feedprof's own frames are skipped)."""
    sites: List[str] = []
    while frame is not None and len(sites) < MAX_LIBRARY_FRAMES:
        fn = frame.f_code.co_filename
        if is_user_file(fn, script_dir):
            return tuple(reversed(sites))
        if not os.path.abspath(fn).startswith(_FEEDPROF_DIR) and not fn.startswith("<"):
            sites.append(f"{os.path.abspath(fn)}:{frame.f_lineno}")
        frame = frame.f_back
    return ()


def display_path(filename: str, script_dir: str) -> str:
    path = os.path.abspath(filename)
    rel = os.path.relpath(path, script_dir)
    return path if rel.startswith("..") else rel


def script_traceback(exc: BaseException) -> str:
    """The script's own traceback, without feedprof's and runpy's frames."""
    te = traceback.TracebackException.from_exception(exc)
    _strip_frames(te)
    return "".join(te.format())

def _strip_frames(te: traceback.TracebackException, seen: Optional[set] = None) -> None:
    seen = set() if seen is None else seen
    if id(te) in seen:
        return
    seen.add(id(te))
    keep = [f for f in te.stack if not os.path.abspath(f.filename).startswith(_FEEDPROF_DIR)
            and not f.filename.endswith(os.sep + "runpy.py")]
    te.stack = traceback.StackSummary.from_list(keep)
    for nxt in (te.__cause__, te.__context__):
        if nxt is not None:
            _strip_frames(nxt, seen)


def failure_hint(exc: BaseException) -> str:
    """The code of a known framework trap the error is (render/words/ says what it
    means), or ""."""
    text = str(exc)
    if isinstance(exc, TypeError) and "fit()" in text and any(
            f"'{knob}'" in text for knob in ("workers", "use_multiprocessing", "max_queue_size")):
        return "fit_workers_moved"  # Keras 3 moved the knobs from fit() to the PyDataset
    return ""
