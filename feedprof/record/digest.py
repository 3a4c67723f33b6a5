"""A short fingerprint of a batch's contents, to tell repeated batches apart.

An ``IterableDataset`` that ignores ``get_worker_info()`` makes every worker
yield the same records: the loop then receives each batch once per worker
(analyse/hazards.py compares the fingerprints of an epoch's first batches).
Hashing whole batches would cost milliseconds for image batches, so each
array contributes its shape, dtype and a sample of its elements (the first
``SAMPLE`` and ``SAMPLE`` more spread evenly over it): identical batches
always match, and different ones almost never do. Each part of a batch (an
array, a list of names) gets its own short digest too.
"""
from __future__ import annotations

import hashlib
from typing import Any, List

SAMPLE = 64  # elements taken from the start of each array, and as many spread over it
MAX_DEPTH = 6  # nesting of (inputs, labels) / {"x": ...} followed
MAX_PARTS = 8  # parts of a batch fingerprinted one by one
MIN_DIGESTS, DIGESTS_PER_WORKER, MAX_DIGESTS = 32, 4, 256


def digests_wanted(workers: int) -> int:
    """Batches to fingerprint: a few from each worker's stream (workers take
    turns), so that repeats across workers and within one can be told apart."""
    return min(MAX_DIGESTS, max(MIN_DIGESTS, DIGESTS_PER_WORKER * workers))


def batch_digest(batch: Any) -> str:
    """A digest of the whole batch (16 hex digits), then one of each of its
    parts (inputs, labels, names...: 8 hex digits each, up to ``MAX_PARTS``),
    dot-separated: a part that repeats across workers shows duplication even
    when random augmentation makes the whole batches differ."""
    h = hashlib.blake2b(digest_size=8)
    parts: List[str] = []
    _feed(h, batch, 0, parts)
    return ".".join([h.hexdigest()] + (parts if len(parts) > 1 else []))


def _part(h: Any, data: bytes, parts: List[str]) -> None:
    h.update(data)
    if len(parts) < MAX_PARTS:
        parts.append(hashlib.blake2b(data, digest_size=4).hexdigest())


def _scalar(obj: Any) -> bool:
    return getattr(obj, "shape", None) is None and not isinstance(obj, (dict, list, tuple))


def _feed(h: Any, obj: Any, depth: int, parts: List[str]) -> None:
    if depth > MAX_DEPTH:
        h.update(type(obj).__name__.encode())
        return
    shape = getattr(obj, "shape", None)
    if shape is not None and not isinstance(obj, (str, bytes)):
        _part(h, repr((tuple(shape), str(getattr(obj, "dtype", "")))).encode() + _sample_bytes(obj), parts)
    elif isinstance(obj, dict):
        for key in sorted(obj, key=repr):
            h.update(repr(key).encode())
            _feed(h, obj[key], depth + 1, parts)
    elif isinstance(obj, (list, tuple)) and obj and all(_scalar(x) for x in obj[:SAMPLE]):
        _part(h, repr(list(obj[:SAMPLE])).encode()[:4096], parts)  # file names, ids: one part
    elif isinstance(obj, (list, tuple)):
        h.update(b"[%d" % len(obj))
        for item in obj[:SAMPLE]:
            _feed(h, item, depth + 1, parts)
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
