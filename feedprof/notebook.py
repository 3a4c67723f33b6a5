"""feedprof in Jupyter: its records as rich HTML, and the ``%%feedprof`` cell magic.

NOTE [ How a record gets its rich output ]

    %load_ext feedprof ───────────────┐
    first feedprof.profile() / tune() ├─► register_display(shell): IPython's text/html formatter
      / load() inside a running shell ┘     learns Summary, Run, TuneResult by module and name
    a record is a cell's last value ─► formatter ─► render/fragments.py ─► HTML with the curves

The store's classes stay free of presentation code (docs/architecture.md); IPython is
never imported here: the shell is found through ``sys.modules``, and the
formatters are registered by name, so nothing is imported until a record is
shown.
"""
from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import weakref
from typing import TYPE_CHECKING, Optional, Union

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from feedprof.store import Run, Summary, TuneResult

RICH_TYPES = (("feedprof.store.run", "Summary"), ("feedprof.store.run", "Run"), ("feedprof.store.tune", "TuneResult"))
_shells: "weakref.WeakSet[InteractiveShell]" = weakref.WeakSet()


def _html(obj: Union["Run", "Summary", "TuneResult"]) -> str:
    from feedprof.render.fragments import fragment

    return fragment(obj)


def register_display(shell: "InteractiveShell") -> None:
    """Teach ``shell`` (an IPython InteractiveShell) to show feedprof's records as HTML."""
    if shell in _shells:
        return
    formatter = shell.display_formatter.formatters["text/html"]
    for module, name in RICH_TYPES:
        formatter.for_type_by_name(module, name, _html)
    _shells.add(shell)


def running_shell() -> Optional["InteractiveShell"]:
    """The IPython shell this code runs in, if any (never imports IPython)."""
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None) if ipython is not None else None
    shell = get() if get is not None else None
    return shell if getattr(shell, "display_formatter", None) is not None else None


def register_if_in_ipython() -> None:
    shell = running_shell()
    if shell is not None:
        register_display(shell)


# ------------------------------------------------------------------ magic


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise ValueError(f"%%feedprof: {message}")


def magic_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="%%feedprof", add_help=False,
                description="Profile the loop in this cell: every torch DataLoader it iterates is timed.")
    p.add_argument("--out", metavar="RUN.json", help="save the run (feedprof.load reads it back)")
    p.add_argument("--report", metavar="REPORT.html", help="write the HTML report")
    p.add_argument("--warmup-batches", type=int, default=5, metavar="N")
    p.add_argument("--interval", type=float, default=0.2, metavar="S", help="sampling period (default 0.2 s)")
    p.add_argument("--no-gpu", action="store_true", help="do not sample the GPU")
    return p


def profile_cell(shell: "InteractiveShell", line: str, cell: str) -> Optional["Run"]:
    """Run ``cell`` in ``shell`` under a profile; return the Run (shown as the cell's output)."""
    from feedprof.frameworks.torch import watching
    from feedprof.session import Profile

    try:
        args = magic_parser().parse_args(shlex.split(line))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return None
    # As %%time runs a cell: IPython's transforms, then exec in the user's namespace; registered
    # with linecache so that a traceback shows the cell's lines.
    source = shell.transform_cell(cell)
    code = shell.compile(shell.compile.ast_parse(source), shell.compile.cache(source), "exec")
    prof = Profile(interval_s=args.interval, gpu=not args.no_gpu, warmup_batches=args.warmup_batches)
    try:
        with prof, watching(prof):
            exec(code, shell.user_ns)  # an error in the cell propagates: IPython shows it as usual
    except KeyboardInterrupt:  # stopped by hand: what was measured is still worth showing
        print("%%feedprof: interrupted; showing what was measured", file=sys.stderr)
    run = dataclasses.replace(prof.run, script=None, argv=())
    if args.out:
        from feedprof.store import save

        save(run, args.out)
    if args.report:
        from feedprof.render.report import write_report

        write_report(run, args.report)
    if not run.loaders:
        print("%%feedprof: the cell iterated no torch DataLoader, so there is nothing to show; "
              "time any other loader with feedprof.profile() and prof.watch(loader)", file=sys.stderr)
        return None
    return run


def load_ipython_extension(shell: "InteractiveShell") -> None:
    """``%load_ext feedprof``: rich output for records and the ``%%feedprof`` cell magic."""
    register_display(shell)

    def feedprof(line: str, cell: str) -> Optional["Run"]:
        return profile_cell(shell, line, cell)

    feedprof.__doc__ = magic_parser().format_help()
    shell.register_magic_function(feedprof, magic_kind="cell", magic_name="feedprof")
