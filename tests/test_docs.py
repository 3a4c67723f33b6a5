"""The documentation stays true to the code and to itself (fast tier: nothing is run).

- docs/cli.md is what docs/make_cli_reference.py renders from the live parser;
- every relative link in README.md and docs/*.md reaches a file, and its #anchor a heading there;
- README.md is a front page: at most 150 lines;
- no file cites a document the repository does not contain;
- no user-facing page names an issue or pull-request number;
- every NOTE diagram in the code is listed, with its file, in docs/architecture.md.
Each check's helper is also tried on a page made to fail it, so a check that can
no longer fail is caught too.
"""
from __future__ import annotations

import difflib
import importlib.util
import os
import re
from typing import Dict, Iterator, List, Set, Tuple

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(REPO, "docs")
REGENERATE = "python docs/make_cli_reference.py"
README_MAX_LINES = 150


def _user_pages() -> List[str]:
    pages = [os.path.join(REPO, "README.md"), os.path.join(REPO, "CHANGELOG.md")]
    return pages + sorted(os.path.join(DOCS, n) for n in os.listdir(DOCS) if n.endswith(".md"))


def _rel(path: str) -> str:
    return os.path.relpath(path, REPO)


# ------------------------------------------------------------ the CLI reference


def _generator():
    spec = importlib.util.spec_from_file_location("make_cli_reference", os.path.join(DOCS, "make_cli_reference.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_is_what_the_parser_says():
    want = _generator().render()
    with open(os.path.join(DOCS, "cli.md"), encoding="utf-8") as fh:
        have = fh.read()
    diff = "".join(list(difflib.unified_diff(have.splitlines(True), want.splitlines(True), "docs/cli.md",
                                             "from the parser"))[:40])
    assert have == want, f"docs/cli.md does not match feedprof's parser: regenerate it with `{REGENERATE}`\n{diff}"


def test_the_cli_reference_names_every_command_and_option():
    import argparse

    from feedprof.cliargs import build_parser

    page = _generator().render()
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        section = page.split(f"## feedprof {name}\n", 1)
        assert len(section) == 2, f"no section for feedprof {name}"
        section = section[1].split("\n## ", 1)[0]
        for action in command._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}`" in section, f"feedprof {name} {option} is missing from docs/cli.md"


# ------------------------------------------------------------------ links


_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """Markdown without its code: fenced blocks and code spans."""
    return _CODE_SPAN.sub("code", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: str) -> Set[str]:
    with open(path, encoding="utf-8") as fh:
        text = _FENCE.sub("", fh.read())
    seen: Dict[str, int] = {}
    out = set()
    for m in _HEADING.finditer(text):
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(path: str) -> Iterator[Tuple[str, str]]:
    """(link, what is wrong) for each relative link in the page that leads nowhere."""
    with open(path, encoding="utf-8") as fh:
        text = _prose(fh.read())
    for target in _LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(dest):
            yield target, f"no such file: {_rel(dest)}"
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            yield target, f"no heading #{anchor} in {_rel(dest)}"


@pytest.mark.parametrize("page", _user_pages(), ids=_rel)
def test_every_relative_link_leads_somewhere(page):
    assert list(broken_links(page)) == [], f"{_rel(page)} has broken links"


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "other.md").write_text("# A page\n\n## `feedprof gpus`: what is on each GPU\n\n## Slurm\n")
    page = tmp_path / "page.md"
    page.write_text("# Here\n[ok](other.md#feedprof-gpus-what-is-on-each-gpu) [ok](#here) [ok](https://x.org/y)\n"
                    "[gone](missing.md) [no anchor](other.md#nowhere) [`code`](#not-here)\n"
                    "```\n[in a code block](missing-too.md)\n```\n`[in a span](missing-three.md)`\n")
    found = dict(broken_links(str(page)))
    assert set(found) == {"missing.md", "other.md#nowhere", "#not-here"}, found


@pytest.mark.parametrize("heading, want", [
    ("Side effects: your script runs many times", "side-effects-your-script-runs-many-times"),
    ("`feedprof gpus`: what is on each GPU", "feedprof-gpus-what-is-on-each-gpu"),
    ("MPI, tf.distribute and other launchers", "mpi-tfdistribute-and-other-launchers"),
    ("Keras 3.15 and tf_keras 2.21", "keras-315-and-tf_keras-221"),
])
def test_anchors_are_githubs(heading, want):
    assert slug(heading) == want


# ------------------------------------------------------------- the front page


def test_the_readme_is_a_front_page():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    assert len(lines) <= README_MAX_LINES, (f"README.md has {len(lines)} lines; the front page keeps to "
                                            f"{README_MAX_LINES}: move the detail into docs/")


# ------------------------------------------- documents the repository does not have

# Written so that this file does not match itself.
_ABSENT = re.compile(r"\bDESIGN[.]md|\bPLATFORM[.]md|(?<![\w-])shared[/]")
_SCANNED_DIRS = ("feedprof", "tests", "benchmarks", "examples", "notebooks", "docs")
_SCANNED_EXTS = (".py", ".md", ".toml", ".ipynb", ".txt")
_SCANNED_FILES = ("README.md", "CHANGELOG.md", "pyproject.toml", os.path.join("tests", "run"),
                  os.path.join(".ci", "run"))


def _repository_files() -> Iterator[str]:
    for name in _SCANNED_FILES:
        if os.path.exists(os.path.join(REPO, name)):
            yield os.path.join(REPO, name)
    for top in _SCANNED_DIRS:
        for folder, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", ".ipynb_checkpoints")]
            for name in files:
                if name.endswith(_SCANNED_EXTS):
                    yield os.path.join(folder, name)


def citations_of_absent_documents(text: str) -> List[Tuple[int, str]]:
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if _ABSENT.search(line)]


def test_no_file_cites_a_document_the_repository_does_not_contain():
    found = []
    for path in _repository_files():
        with open(path, encoding="utf-8", errors="replace") as fh:
            found += [f"{_rel(path)}:{n}: {line}" for n, line in citations_of_absent_documents(fh.read())]
    assert found == [], ("these cite documents the repository does not contain; point them at the page in "
                         "docs/ that says it:\n" + "\n".join(found))


def test_a_citation_of_an_absent_document_is_found():
    design, platform, shared = "DESIGN" + ".md", "PLATFORM" + ".md", "shared" + "/"
    text = f"a ({design}, 'Contracts')\nb (see {shared}{platform})\nc (../{shared}tools)\nd docs/architecture.md\n" \
           "e pages shared with workers\nf memory-shared/x\n"
    assert [n for n, _ in citations_of_absent_documents(text)] == [1, 2, 3]


# ------------------------------------------------------------ issue numbers

_ISSUE = re.compile(r"\b(?:issues?|PRs?|pull[ -]requests?|tickets?|bugs?)[\s#:-]*\d+\b|(?<![\w&])#\d+\b", re.I)
_LINK_TARGET = re.compile(r"\]\([^)]*\)")


def issue_numbers(text: str) -> List[str]:
    """Issue or pull-request numbers a reader cannot look up ("issue 11", "#22"); a link's
    target (an anchor such as #3-steps) is not one."""
    return [m.group(0) for m in _ISSUE.finditer(_LINK_TARGET.sub("]()", text))]


@pytest.mark.parametrize("page", _user_pages(), ids=_rel)
def test_user_pages_name_no_issue_numbers(page):
    with open(page, encoding="utf-8") as fh:
        text = fh.read()
    assert issue_numbers(text) == [], f"{_rel(page)} names issue numbers a reader cannot see"
    assert not re.search(r"\bthis session\b", text, re.I), f"{_rel(page)} has a note on who ran what"


def test_an_issue_number_is_found():
    text = ("targets (issue 11); issue-22's shapes; see #22. Issues 3 and 4; PR 12; pull request #7.\n"
            "[the steps](tune.md#2-steps), `#  role`, ±1%, &#8212;, 22 November 2026, C#7")
    assert issue_numbers(text) == ["issue 11", "issue-22", "#22", "Issues 3", "PR 12", "pull request #7"]


# ------------------------------------------------------------ the NOTE diagrams

_NOTE = re.compile(r"NOTE \[ (.+?) \]")


def _notes_in_code() -> Set[Tuple[str, str]]:
    found = set()
    for path in _repository_files():
        if path.endswith(".py") and _rel(path).split(os.sep)[0] in ("feedprof", "benchmarks"):
            with open(path, encoding="utf-8") as fh:
                found |= {(m.group(1), _rel(path)) for m in _NOTE.finditer(fh.read())}
    return found


def _notes_listed(text: str) -> Set[Tuple[str, str]]:
    return set(re.findall(r"^\| (.+?) \| `([^`]+)` \|$", text, re.M))


def test_every_note_diagram_is_listed_with_its_file():
    with open(os.path.join(DOCS, "architecture.md"), encoding="utf-8") as fh:
        listed = _notes_listed(fh.read())
    in_code = _notes_in_code()
    assert in_code - listed == set(), "NOTEs missing from docs/architecture.md's table"
    assert {n for n in listed if n[1].endswith(".py")} - in_code == set(), "rows whose NOTE is gone"
    assert _notes_listed("| A | `x.py` |\n") == {("A", "x.py")}  # (the reader can find a row)


# ------------------------------------------- facts the pages repeat, from their one source

RESULTS = os.path.join(REPO, "benchmarks", "results")
# The README's benchmark table and the results page's first table: the latest run of each of the
# four workloads, quiet and with one core busy (docs/benchmarks.md names the commands).
LATEST_TUNES = {"quiet": ("tune-repeat-heldout2-cpu-2core.json", "tune-repeat-noise-cpu-2core.json"),
                "busy": ("tune-repeat-heldout2-busy1-cpu-2core.json", "tune-repeat-heldout3-busy1-cpu-2core.json")}
ONLINE_VS_BEST = "online-vs-offline-cpu-2core.json"  # the online runs' time over the best config's, and quality


def _read(*parts: str) -> str:
    with open(os.path.join(REPO, *parts), encoding="utf-8") as fh:
        return fh.read()


def _results(name: str) -> dict:
    import json

    with open(os.path.join(RESULTS, name), encoding="utf-8") as fh:
        return json.load(fh)


def _tunes(machine: str) -> List[Tuple[str, int, dict]]:
    """(workload, tune number, the tune's row) of every tune of the latest runs."""
    return [(row["workload"], k, tune) for name in LATEST_TUNES[machine] for row in _results(name)["rows"]
            for k, tune in enumerate(row["tunes"], 1)]


def pct_range(values: List[float]) -> str:
    return f"{round(100 * min(values))}–{round(100 * max(values))} %"


def ratio_range(values: List[float]) -> str:
    return f"{min(values):.2f}–{max(values):.2f}"


def benchmark_summary(machine: str) -> Dict[str, str]:
    """The summary the README and the results page quote, computed from the results files."""
    tunes = [t for _, _, t in _tunes(machine)]
    return {"held_out": pct_range([t["quality_held_out"] for t in tunes]),
            "ratio": ratio_range([t["tune_pick_batches_per_s"] / t["independent_pick_per_s"] for t in tunes]),
            "time": f"{min(t['tune_s'] for t in tunes):.0f}–{max(t['tune_s'] for t in tunes):.0f} s"}


def tune_row(workload: str, machine: str, k: int, t: dict) -> str:
    """The results page's row of one tune, as the results file gives it."""
    ratio = t["tune_pick_batches_per_s"] / t["independent_pick_per_s"]
    return (f"| {workload} | {machine} | {k} | {t['recommended']} | {round(100 * t['quality'])} % | "
            f"{round(100 * t['quality_held_out'])} % | {t['tune_pick_batches_per_s']:.1f} | "
            f"{t['independent_pick_per_s']:.1f} | {ratio:.2f} | {t['tune_s']:.0f} s ({t['trials']} trials) |")


def test_the_benchmark_figures_the_readme_quotes_are_the_results_files():
    quiet, busy = benchmark_summary("quiet"), benchmark_summary("busy")
    readme = _read("README.md")
    assert f"| picks, held out, share of the best | {quiet['held_out']} | {busy['held_out']} |" in readme
    assert f"| feedprof's figure / the harness's | {quiet['ratio']} | {busy['ratio']} |" in readme
    page = _read("docs", "benchmarks.md")
    assert f"| picks, held out, share of the best | {quiet['held_out']} | {busy['held_out']} |" in page
    assert f"| feedprof's figure / the harness's | {quiet['ratio']} | {busy['ratio']} |" in page
    assert f"| tune time | {quiet['time']} | {busy['time']} |" in page
    for machine in LATEST_TUNES:
        for workload, k, tune in _tunes(machine):
            assert tune_row(workload, machine, k, tune) in page, f"docs/benchmarks.md lacks {workload} {machine} {k}"


def test_the_online_figures_the_pages_quote_are_the_results_file():
    rows = _results(ONLINE_VS_BEST)["rows"]
    took = f"{min(r['online_vs_best'] for r in rows):.2f}–{max(r['online_vs_best'] for r in rows):.2f}×"
    picks = ratio_range([r["quality"] for r in rows])
    assert f"Online runs took {took} the best grid config's, their picks {picks} of the best" in \
        " ".join(_read("README.md").split())
    assert f"Online runs took {took} as long as the best config's from the start, exploring included, with " \
           f"picks at {picks} of the best" in " ".join(_read("docs", "benchmarks.md").split())
    assert f"took {took} as long as the best config run from the start" in " ".join(_read("docs", "online.md").split())


def test_a_summary_that_no_longer_matches_its_results_is_caught():
    tunes = [{"quality_held_out": 0.955, "tune_pick_batches_per_s": 110.0, "independent_pick_per_s": 100.0},
             {"quality_held_out": 1.02, "tune_pick_batches_per_s": 99.0, "independent_pick_per_s": 100.0}]
    assert pct_range([t["quality_held_out"] for t in tunes]) == "96–102 %"  # (not the README's 95–100 %)
    assert ratio_range([t["tune_pick_batches_per_s"] / t["independent_pick_per_s"] for t in tunes]) == "0.99–1.10"


def _cells(line: str) -> List[str]:
    """A table row's cells (a pipe escaped as \\| is text: ``S\\|N%``)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def _cli_defaults() -> Dict[Tuple[str, str], str]:
    """(command, option) -> the default cell of docs/cli.md, as the generator renders it from the parser."""
    found, command = {}, None
    for line in _generator().render().splitlines():
        m = re.match(r"## feedprof (\w+)", line)
        command = m.group(1) if m else command
        cells = _cells(line) if line.startswith("| `-") else []
        for option in re.findall(r"`(--[\w-]+)`", cells[0]) if cells else ():
            found[(command, option)] = cells[2].strip("`")
    return found


@pytest.mark.parametrize("command, option", [("tune", "--out"), ("tune", "--explore"), ("tune", "--max-workers"),
                                             ("tune", "--max-memory"), ("tune", "--trial-timeout"),
                                             ("tune", "--budget"), ("profile", "--out"), ("profile", "--timeout")])
def test_the_cli_reference_shows_every_default(command, option):
    assert _cli_defaults()[(command, option)], f"docs/cli.md shows no default for feedprof {command} {option}"


def test_every_option_with_a_default_shows_it():
    import argparse

    from feedprof.cliargs import build_parser

    shown = _cli_defaults()
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        for a in command._actions:
            says_default = "(default" in (a.help or "")
            if a.option_strings and a.nargs != 0 and (a.default is not None or says_default):
                assert shown[(name, a.option_strings[-1])], f"feedprof {name} {a.option_strings[-1]}: no default shown"


# Pages whose option tables have a default column, and the command whose options they are.
OPTION_TABLES = {"tune.md": "tune", "online.md": "tune"}


def option_table_defaults(text: str) -> Dict[str, str]:
    """option -> its default cell, from the tables of a page whose header is `| option | default | ...`."""
    found, in_table = {}, False
    for line in text.splitlines():
        if line.startswith("| option | default |"):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("|---"):
            cells = _cells(line)
            for option in re.findall(r"`(--[\w-]+)", cells[0]):
                found[option] = cells[1].strip("`")
    return found


@pytest.mark.parametrize("page", sorted(OPTION_TABLES))
def test_the_defaults_a_page_quotes_are_the_parsers(page):
    shown = _cli_defaults()
    command = OPTION_TABLES[page]
    quoted = option_table_defaults(_read("docs", page))
    assert quoted, f"docs/{page} has no table of options with their defaults"
    for option, default in quoted.items():
        if default in ("", "off") or default.startswith("as for") or (command, option) not in shown:
            continue
        parser_says = shown[(command, option)]
        assert default in (parser_says, f"{parser_says} s"), \
            f"docs/{page} says {option} defaults to {default!r}; the parser (docs/cli.md) says {parser_says!r}"


def test_a_default_that_differs_from_the_parser_is_found():
    table = "| option | default | what for |\n|---|---|---|\n| `--budget S` | 90 | x |\n| `--quiet` | off | y |\n"
    assert option_table_defaults(table) == {"--budget": "90", "--quiet": "off"}


# ------------------------------------------------------- the shape of the user's pages

_CONTRIBUTOR_PAGES = ("architecture.md", "testing.md", "cli.md")
_COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def _internal_names() -> Set[str]:
    """The package's module files, as a page would name them (``torch_carry.py``), and the
    internal names a page must not lean on."""
    names = {"Switcher"}
    for folder, _, files in os.walk(os.path.join(REPO, "feedprof")):
        if os.path.basename(folder) in ("feedprof", "__pycache__"):
            continue  # (feedprof/*.py: the package's own entry points; a user may meet cli.py in a traceback)
        names |= {f for f in files if f.endswith(".py") and f != "__init__.py"}
    return names


def internal_names_in(text: str, names: Set[str]) -> List[str]:
    return sorted(n for n in names if re.search(rf"(?<![\w.-]){re.escape(n)}(?![\w.])", text))


def test_the_results_page_and_the_online_page_are_short_and_name_no_commit():
    benchmarks, online = _read("docs", "benchmarks.md"), _read("docs", "online.md")
    assert len(benchmarks.splitlines()) <= 250, "docs/benchmarks.md is a results page: at most 250 lines"
    assert len(online.splitlines()) <= 200, "docs/online.md is a user's page: at most 200 lines (the rest: " \
                                            "docs/online-reference.md)"
    assert _COMMIT.findall(benchmarks) == [], "docs/benchmarks.md names commits: say the date and the command"
    assert _COMMIT.findall("on 5c1e2bc, at 8288bcb; 2026-11-27; 0x1f; deadbeef") == ["5c1e2bc", "8288bcb"]


@pytest.mark.parametrize("page", [p for p in _user_pages() if os.path.basename(p) not in _CONTRIBUTOR_PAGES], ids=_rel)
def test_user_pages_name_no_internal_module(page):
    with open(page, encoding="utf-8") as fh:
        found = internal_names_in(fh.read(), _internal_names())
    assert found == [], f"{_rel(page)} names feedprof's internals ({found}): say what they do instead"


def test_an_internal_name_is_found():
    names = {"torch_carry.py", "contract.py", "Switcher"}
    text = "(`frameworks/torch_carry.py`) a `Switcher` says ... my_contract.py, train.py, contract.pyc"
    assert internal_names_in(text, names) == ["Switcher"] + ["torch_carry.py"]
