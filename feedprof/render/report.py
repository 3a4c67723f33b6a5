"""The report page for whichever record: a tune's (render/html.py render_tune), a run's
(render_run), several nodes' tunes merged (render/nodes.py); written whole, then renamed."""
from __future__ import annotations

from typing import Union

from feedprof.analyse.merge import MergedTunes
from feedprof.render.html import render_run, render_tune
from feedprof.render.nodes import render_tunes
from feedprof.store import Run, StoreError, TuneResult
from feedprof.store.codec import write_text_atomic

Report = Union[TuneResult, Run, MergedTunes]


def render(obj: Report) -> str:
    if isinstance(obj, MergedTunes):
        return render_tunes(obj)
    if isinstance(obj, TuneResult):
        return render_tune(obj)
    if isinstance(obj, Run):
        return render_run(obj)
    raise StoreError(f"cannot render a {type(obj).__name__}")


def write_report(obj: Report, path: str) -> str:
    """Render a Run, a TuneResult or merged tunes to ``path`` (written whole, then renamed)."""
    write_text_atomic(path, render(obj))
    return path
