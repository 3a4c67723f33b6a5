"""Numbers with their units, worded once for every layer (analyse writes
reasons, render writes tables: both say "1.2 GiB" and "12.3 batches/s")."""
from __future__ import annotations

from typing import Optional


def fmt_bytes(n: Optional[float]) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit in ("B", "KiB") else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def fmt_num(x: Optional[float]) -> str:
    """About three significant figures, for rates that span 0.1 to 10,000."""
    if x is None:
        return "n/a"
    digits = 0 if x >= 100 else 1 if x >= 10 else 2
    return f"{x:.{digits}f}"


def fmt_rate(x: Optional[float], unit: str = "batches/s") -> str:
    return "n/a" if x is None else f"{fmt_num(x)} {unit}"


def fmt_pct(fraction: Optional[float]) -> str:
    if fraction is None:
        return "n/a"
    if 0 < fraction < 0.005:
        return "<1 %"
    return f"{100 * fraction:.0f} %"


def fmt_cores(cpu_pct: Optional[float]) -> str:
    """psutil's per-process percent (100 = one core) as cores."""
    return "n/a" if cpu_pct is None else f"{cpu_pct / 100:.2f} cores"


def fmt_seconds(s: Optional[float]) -> str:
    """"250 ms", "12.5 s", "4 min 05 s", "2 h 11 min": a long run is read in minutes and hours."""
    if s is None:
        return "n/a"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 100:
        return f"{s:.1f} s"
    minutes = int(round(s)) // 60
    if minutes < 60:
        return f"{minutes} min {int(round(s)) % 60:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


_SIZES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text: str) -> int:
    """"8G", "512M", "1.5GiB", "1000" (bytes) -> bytes; ValueError if it is not a size."""
    body = text.strip().upper()
    body = body[:-2] if body.endswith("IB") else body[:-1] if body.endswith("B") else body
    unit = body[-1:] if body[-1:] in _SIZES else ""
    try:
        value = float(body[:-1] if unit else body) * _SIZES[unit]
    except ValueError:
        raise ValueError(f"expected a size like 8G or 512M, got {text!r}") from None
    if not value >= 1:
        raise ValueError(f"expected a positive size, got {text!r}")
    return int(value)


def fmt_path(path: str) -> str:
    """A path for people: relative to the working directory only when that is shorter than the absolute
    path (``--out /tmp/x`` is shown as ``/tmp/x/run.json``, not ``../../../tmp/x/run.json``)."""
    import os

    absolute = os.path.abspath(path)
    try:
        relative = os.path.relpath(absolute)
    except ValueError:  # another drive (Windows)
        return absolute
    return relative if len(relative) < len(absolute) else absolute
