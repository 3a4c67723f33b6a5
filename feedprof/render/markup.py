"""HTML pieces every page builds on: escaping, and a table of escaped cells."""
from __future__ import annotations

import html
from typing import Any, Iterable, Sequence, Tuple


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def table(headers: Sequence[Tuple[str, bool]], rows: Iterable[Tuple[str, Sequence[str]]]) -> str:
    """headers: (label, numeric); rows: (css class, cells already escaped)."""
    num_cls = ' class="num"'
    head = "".join(f"<th{num_cls if num else ''}>{esc(h)}</th>" for h, num in headers)
    body = []
    for cls, cells in rows:
        tds = "".join(f"<td{num_cls if num else ''}>{c}</td>" for (_, num), c in zip(headers, cells))
        row_cls = f' class="{cls}"' if cls else ""
        body.append(f"<tr{row_cls}>{tds}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
