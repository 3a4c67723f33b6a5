"""The check every paste line passes before it is shown (frameworks/paste_check.py):
a statement parses, passes no keyword twice (by name, or beside a ** splat that
passes it too) and changes something; a command line splits into shell words,
gives no flag twice and changes something."""
from feedprof.frameworks.paste_check import check_command, check_statement, gives
from feedprof.render.words import say
from feedprof.store.codes import LineProblem
from feedprof.store.reasons import PasteLineWithheld


def test_a_statement_that_parses_and_changes_something_passes():
    check = check_statement("loader = DataLoader(ds, num_workers=8)  # train.py:9",
                            before="loader = DataLoader(ds, num_workers=2)")
    assert check.ok and check.problem == LineProblem.NONE


def test_a_statement_that_does_not_parse_fails():
    check = check_statement("loader = DataLoader(ds, num_workers=8")
    assert check.problem == LineProblem.DOES_NOT_PARSE and check.detail


def test_a_keyword_given_twice_by_name_fails():
    check = check_statement("create_loader(ds, num_workers=args.workers, num_workers=8)")
    assert (check.problem, check.detail) == (LineProblem.KEYWORD_TWICE, "num_workers")


def test_a_keyword_added_beside_a_splat_that_passes_it_fails():
    # timm's shape: parses, yet Python raises "got multiple values for keyword argument"
    line = "loader = create_loader(ds, **common_loader_kwargs, **train_loader_kwargs, num_workers=2)"
    assert check_statement(line).ok  # the line alone cannot tell
    check = check_statement(line, splats={"num_workers": True})
    assert (check.problem, check.detail) == (LineProblem.KEYWORD_TWICE, "num_workers")
    check = check_statement(line, splats={"num_workers": False})  # a splat feedprof cannot read
    assert check.problem == LineProblem.KEYWORD_MAYBE_TWICE
    # the same keyword on a call without splats is another call's business
    assert check_statement("f(num_workers=2, g=h(**kw))", splats={"num_workers": True}).ok


def test_a_statement_that_changes_nothing_fails():
    before = "loader = DataLoader(ds,\n    num_workers=2)"
    check = check_statement("loader = DataLoader(ds, num_workers=2)  # train.py:9", before=before)
    assert check.problem == LineProblem.UNCHANGED
    assert check_statement("x = 1", before="not python (").ok  # an unreadable before: a change


def test_command_lines_are_checked_as_shell_words():
    assert check_command("python train.py --epochs 3 -j 8", before="python train.py --epochs 3 -j 2").ok
    assert check_command("python train.py --name 'a b").problem == LineProblem.DOES_NOT_PARSE
    assert check_command("python train.py -j 8", before="python train.py -j 8").problem == LineProblem.UNCHANGED
    check = check_command("python train.py -j 2 --workers=8", flags=[("-j", "--workers")])
    assert (check.problem, check.detail) == (LineProblem.FLAG_TWICE, "-j")
    assert check_command("python train.py -j8 --jobs 3", flags=[("-j", "--workers")]).ok


def test_which_words_give_an_option():
    assert gives("-j", "-j") and gives("-j8", "-j") and gives("--workers=8", "--workers")
    assert not gives("-jx", "-j") and not gives("--workers-max", "--workers") and not gives("--w", "--workers")


def test_a_withheld_line_says_what_to_set_where():
    statement = PasteLineWithheld(site="train.py:40", call="create_loader", problem=LineProblem.KEYWORD_TWICE,
                                  detail="num_workers", settings={"num_workers": 8})
    words = say(statement)
    assert "train.py:40" in words and "num_workers twice to create_loader(...)" in words
    assert "Set num_workers=8 there by hand" in words
    command = PasteLineWithheld(problem=LineProblem.FLAG_TWICE, detail="-j", settings={"-j": "8", "--pin": None})
    assert "Run the script with `-j 8 --pin` instead" in say(command)
