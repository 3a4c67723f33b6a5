"""Write docs/cli.md from feedprof's own argparse parser (feedprof.cliargs.build_parser).

    python docs/make_cli_reference.py          # regenerate docs/cli.md after changing an option

tests/test_docs.py renders the page in memory and fails when docs/cli.md differs.
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PAGE = os.path.join(HERE, "cli.md")


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _help(action: argparse.Action, prog: str) -> str:
    params = dict(vars(action), prog=prog)
    return _cell((action.help or "") % params)


def _synopsis(prog: str, parser: argparse.ArgumentParser) -> str:
    if parser.usage:  # a command that says its own forms (the script, then its arguments)
        return "\n".join(line.strip() for line in (parser.usage % {"prog": prog}).splitlines())
    words = [prog]
    if any(a.option_strings for a in parser._actions if not isinstance(a, argparse._HelpAction)):
        words.append("[options]")
    for a in parser._actions:
        if a.option_strings or isinstance(a, argparse._SubParsersAction):
            continue
        name = a.metavar or a.dest
        words.append({"?": f"[{name}]", "*": f"[{name} ...]", "+": f"{name} [{name} ...]"}.get(a.nargs, name))
    return " ".join(words)


def _options(parser: argparse.ArgumentParser, prog: str) -> list:
    lines = []
    for group in parser._action_groups:
        rows = []
        for a in group._group_actions:
            if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if a.option_strings:
                name = ", ".join(f"`{o}`" for o in a.option_strings)
                arg = "" if a.nargs == 0 else f"`{_cell(a.metavar or a.dest.upper())}`"
            else:
                name, arg = f"`{_cell(a.metavar or a.dest)}` (positional)", ""
            default = f"{a.default:g}" if isinstance(a.default, float) else a.default
            shown = "" if default in (None, False, argparse.SUPPRESS) or a.nargs == 0 else f"`{_cell(default)}`"
            if getattr(a, "default_words", None):  # worked out when the command runs (cliargs.shown_default)
                shown = _cell(a.default_words) if " " in a.default_words else f"`{_cell(a.default_words)}`"
            rows.append(f"| {name} | {arg} | {shown} | {_help(a, prog)} |")
        if rows:
            title = "Options" if group.title in ("options", "optional arguments") else (
                "Arguments" if group.title == "positional arguments" else group.title.capitalize())
            lines += ["", f"**{title}**", "", "| option | argument | default | meaning |", "|---|---|---|---|"] + rows
    return lines


def render() -> str:
    if os.path.dirname(HERE) not in sys.path:  # run as a script from anywhere
        sys.path.insert(0, os.path.dirname(HERE))
    from feedprof.cliargs import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = ["# Command-line reference", "",
           "<!-- Generated from feedprof's argparse parser by docs/make_cli_reference.py: do not edit by hand. -->",
           "", _cell(parser.description), "", "```", _synopsis("feedprof", parser) + " COMMAND ...", "```", "",
           "| command | what it does |", "|---|---|"]
    out += [f"| [`feedprof {c.dest}`](#feedprof-{c.dest}) | {_cell(c.help)} |" for c in sub._choices_actions]
    out += _options(parser, "feedprof")
    out += ["", "Every command takes `-h` / `--help` before the script. In `profile` and `tune`, everything after "
            "the script is the script's own arguments (`--help` too), as `python -m cProfile train.py ARGS` takes "
            "them: feedprof's options go before the script. A multi-process job's launch command goes after "
            "`--`, in place of the script."]
    for name, p in sub.choices.items():
        out += ["", f"## feedprof {name}", "", _cell(p.description), "", "```", _synopsis(p.prog, p), "```"]
        out += _options(p, p.prog)
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    with open(PAGE, "w", encoding="utf-8") as fh:
        fh.write(render())
    print(f"wrote {os.path.relpath(PAGE)}")
