"""Which torch versions online mode switches, and the check at start that the private
members of torch's DataLoader iterators it leans on are there and used as it expects.

Online mode (frameworks/torch_online.py, torch_pool.py) builds torch's own iterators on a
private copy of the loader and reads or overrides these members:

    DataLoader._index_sampler, ._get_iterator          the epoch's order, the iterator kind
    _BaseDataLoaderIter: _sampler_iter, _base_seed      (the seed is overridden, never drawn)
                         _next_index                    every index is taken from the feed
    _MultiProcessingDataLoaderIter: _reset, _send_idx, _rcvd_idx, _try_put_index,
                         _shutdown_workers, _workers, _timeout
    _utils.signal_handling._set_worker_pids             kept away from feedprof's pools

On a torch outside SUPPORTED, or where one of them is missing, the run is observed with the
script's own settings and the summary says why. What is read at run time is also checked
as it goes (torch_ledger.py): a counter that disagrees falls back to the script's settings.
"""
from __future__ import annotations

import re
from typing import Any, Optional, Tuple

from feedprof.store.online import TORCH_SWITCHED

SUPPORTED = TORCH_SWITCHED  # (major, minor), both ends included
TESTED = ("2.5.1", "2.13.0", "2.14.1")  # the seeded online tests run on each (./tests/run --all)

# where each member must be used: (class path, method, names its code must mention)
_USES = (
    ("_BaseDataLoaderIter", "__init__", ("_index_sampler", "_sampler_iter", "_base_seed")),
    ("_BaseDataLoaderIter", "_next_index", ("_sampler_iter",)),
    ("_MultiProcessingDataLoaderIter", "__init__", ("_base_seed", "_set_worker_pids", "_workers", "_reset")),
    ("_MultiProcessingDataLoaderIter", "_reset", ("_send_idx", "_rcvd_idx", "_try_put_index")),
    ("_MultiProcessingDataLoaderIter", "_try_put_index", ("_next_index", "_send_idx")),
    ("_MultiProcessingDataLoaderIter", "_next_data", ("_rcvd_idx", "_send_idx")),
    ("_MultiProcessingDataLoaderIter", "_shutdown_workers", ()),
    ("_SingleProcessDataLoaderIter", "_next_data", ("_next_index",)),
)


def version_tuple(text: str) -> Tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def why_unsupported(torch: Any = None) -> Optional[str]:
    """None where online mode may switch this torch's loaders, else a reason code:
    ``torch_version:<version>`` or ``torch_private:<member>``."""
    if torch is None:
        import torch
    version = str(getattr(torch, "__version__", "0"))
    lo, hi = SUPPORTED
    if not lo <= version_tuple(version) <= hi:
        return f"torch_version:{version.split('+')[0]}"
    return _missing_member()


def _missing_member() -> Optional[str]:
    from torch.utils.data import DataLoader, dataloader as dl

    for name in ("_index_sampler", "_get_iterator"):
        if not hasattr(DataLoader, name):
            return f"torch_private:DataLoader.{name}"
    handling = getattr(getattr(dl, "_utils", None), "signal_handling", None)
    if not callable(getattr(handling, "_set_worker_pids", None)):
        return "torch_private:signal_handling._set_worker_pids"
    for cls_name, method, names in _USES:
        code = getattr(getattr(getattr(dl, cls_name, None), method, None), "__code__", None)
        if code is None:
            return f"torch_private:{cls_name}.{method}"
        used = set(code.co_names)
        for name in names:
            if name not in used:
                return f"torch_private:{cls_name}.{method} no longer uses {name}"
    return None
