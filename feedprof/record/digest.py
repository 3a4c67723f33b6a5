"""A short fingerprint of a batch's contents, to tell repeated batches apart.

An ``IterableDataset`` that ignores ``get_worker_info()`` makes every worker
yield the same records: the loop then receives each batch once per worker
(analyse/hazards.py compares the fingerprints of an epoch's first batches).
Hashing whole batches would cost milliseconds for image batches, so each
array contributes its shape, dtype and a sample of its elements (the first
``SAMPLE`` and ``SAMPLE`` more spread evenly over it): identical batches
always match, and different ones almost never do.
"""
from __future__ import annotations

import hashlib
from typing import Any

SAMPLE = 64  # elements taken from the start of each array, and as many spread over it
MAX_DEPTH = 6  # nesting of (inputs, labels) / {"x": ...} followed
MIN_DIGESTS, DIGESTS_PER_WORKER, MAX_DIGESTS = 32, 4, 256


def digests_wanted(workers: int) -> int:
    """Batches to fingerprint: a few from each worker's stream (workers take
    turns), so that repeats across workers and within one can be told apart."""
    return min(MAX_DIGESTS, max(MIN_DIGESTS, DIGESTS_PER_WORKER * workers))


def batch_digest(batch: Any) -> str:
    """16 hex digits that depend only on the batch's contents."""
    h = hashlib.blake2b(digest_size=8)
    _feed(h, batch, 0)
    return h.hexdigest()


def _feed(h: Any, obj: Any, depth: int) -> None:
    if depth > MAX_DEPTH:
        h.update(type(obj).__name__.encode())
        return
    shape = getattr(obj, "shape", None)
    if shape is not None and not isinstance(obj, (str, bytes)):
        h.update(repr((tuple(shape), str(getattr(obj, "dtype", "")))).encode())
        h.update(_sample_bytes(obj))
    elif isinstance(obj, dict):
        for key in sorted(obj, key=repr):
            h.update(repr(key).encode())
            _feed(h, obj[key], depth + 1)
    elif isinstance(obj, (list, tuple)):
        h.update(b"[%d" % len(obj))
        for item in obj[:SAMPLE]:
            _feed(h, item, depth + 1)
    else:
        h.update(repr(obj).encode()[:256])


def _sample_bytes(arr: Any) -> bytes:
    """The sampled elements' bytes (a torch tensor on any device, a NumPy array)."""
    if hasattr(arr, "detach") and hasattr(arr, "reshape"):  # torch: sample on its device, copy only that
        flat = arr.detach().reshape(-1)
        n = int(flat.shape[0])
        if n > 2 * SAMPLE:
            import torch

            flat = torch.cat([flat[:SAMPLE], flat[::max(1, n // SAMPLE)][:SAMPLE]])
        flat = flat.cpu()
        try:
            return flat.numpy().tobytes()
        except TypeError:  # bfloat16 and the like have no NumPy type
            return flat.float().numpy().tobytes()
    import numpy as np

    try:
        flat = np.asarray(arr).reshape(-1)
    except (TypeError, ValueError):  # not convertible: its repr still separates most batches
        return repr(arr)[:512].encode()
    n = flat.shape[0]
    if n > 2 * SAMPLE:
        flat = np.concatenate([flat[:SAMPLE], flat[::max(1, n // SAMPLE)][:SAMPLE]])
    return flat.tobytes() if flat.dtype != object else repr(flat.tolist()).encode()
