"""The check every paste line passes before it is shown (paste.py): a line that
fails is not shown, and the advice says in words what to set and where.

NOTE [ What a paste line must be ]

    a statement     ast.parse accepts it; no call in it passes a keyword twice, by
                    name or by name beside a ** splat that passes it too (Python
                    raises "got multiple values for keyword argument"); it is not
                    the script's own statement unchanged
    a command line  shlex splits it into words; it gives none of the advised flags
                    twice; it is not the command line the script already runs with

The splats' contents come from the script's source (kwargs.py): the check is
told which keywords the rewrite added beside a splat that passes them
(``splats``), since the line alone cannot say.
"""
from __future__ import annotations

import ast
import shlex
from dataclasses import dataclass
from typing import Mapping, Sequence

from feedprof.store.codes import LineProblem


@dataclass(frozen=True)
class Check:
    problem: LineProblem = LineProblem.NONE
    detail: str = ""  # the keyword or flag given twice, or the parser's message

    @property
    def ok(self) -> bool:
        return self.problem == LineProblem.NONE


def check_statement(text: str, before: str = "", splats: Mapping[str, bool] = {}) -> Check:
    """``text`` (Python statements, comments allowed) to paste over ``before`` (the
    script's own statement; "": not known). ``splats``: keywords the rewrite added to
    a call whose ``**`` splats pass them too (True) or may (False: a splat that
    cannot be read)."""
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        return Check(LineProblem.DOES_NOT_PARSE, f"{e.msg} (column {e.offset})" if e.offset else e.msg)
    for call in (node for node in ast.walk(tree) if isinstance(node, ast.Call)):
        named = [kw.arg for kw in call.keywords if kw.arg is not None]
        twice = next((k for k in named if named.count(k) > 1), None)
        if twice is not None:
            return Check(LineProblem.KEYWORD_TWICE, twice)
        if any(kw.arg is None for kw in call.keywords):
            beside = [k for k in named if k in splats]
            if beside:
                sure = any(splats[k] for k in beside)
                return Check(LineProblem.KEYWORD_TWICE if sure else LineProblem.KEYWORD_MAYBE_TWICE, beside[0])
    if before and _same(tree, before):
        return Check(LineProblem.UNCHANGED)
    return Check()


def _same(tree: ast.AST, before: str) -> bool:
    try:
        return ast.dump(tree) == ast.dump(ast.parse(before))
    except SyntaxError:
        return False


def check_command(text: str, before: str = "", flags: Sequence[Sequence[str]] = ()) -> Check:
    """A command line to run in place of ``before`` (the one the script ran with; "":
    not known). ``flags``: each advised flag's option strings (``-j``, ``--workers``)."""
    try:
        words = shlex.split(text)
    except ValueError as e:
        return Check(LineProblem.DOES_NOT_PARSE, str(e))
    if not words:
        return Check(LineProblem.DOES_NOT_PARSE, "no words")
    for options in flags:
        given = [w for w in words if any(gives(w, option) for option in options)]
        if len(given) > 1:
            return Check(LineProblem.FLAG_TWICE, options[0] if options else given[0])
    if before:
        try:
            if shlex.split(before) == words:
                return Check(LineProblem.UNCHANGED)
        except ValueError:
            pass  # the script's own line does not split: the new one is a change
    return Check()


def gives(word: str, option: str) -> bool:
    """Is ``word`` the option ``option`` (``--workers``, ``--workers=8``, ``-j``, ``-j8``)?"""
    if word == option or word.startswith(option + "="):
        return True
    return not option.startswith("--") and word.startswith(option) and word[len(option):].isdigit()
