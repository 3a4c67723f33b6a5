"""Paste-ready lines: the script's own statement with the knobs changed (pure AST)."""
import textwrap

from feedprof.frameworks.source import find_call, resolve_site, rewrite_call, rewrite_statement

SCRIPT = textwrap.dedent('''
    import torch
    from torch.utils.data import DataLoader

    train = DataLoader(ds, 32, True, num_workers=0,
                       pin_memory=True)
    for batch in DataLoader(val, batch_size=8):
        pass
    ds = ds.map(parse, num_parallel_calls=2).batch(32)
''').lstrip()


def write(tmp_path, text=SCRIPT):
    path = tmp_path / "train.py"
    path.write_text(text)
    return str(path)


def test_resolve_site_relative_to_the_script_and_absolute(tmp_path):
    script = str(tmp_path / "train.py")
    assert resolve_site("train.py:54", script) == (str(tmp_path / "train.py"), 54)
    assert resolve_site("/abs/lib.py:3", script) == ("/abs/lib.py", 3)
    assert resolve_site("pkg/data.py:7", script) == (str(tmp_path / "pkg" / "data.py"), 7)
    for bad in ("", "train.py", "train.py:x", ":12"):
        assert resolve_site(bad, script) is None


def test_a_statement_keeps_everything_but_the_knobs(tmp_path):
    path = write(tmp_path)
    line, name = rewrite_statement(path, 4, ("DataLoader",), {"num_workers": 8, "persistent_workers": True},
                                   drop=["pin_memory"])
    assert name == "train"
    assert line == "train = DataLoader(ds, 32, True, num_workers=8, persistent_workers=True)"


def test_a_knob_passed_positionally_is_replaced_where_it_stands(tmp_path):
    path = write(tmp_path, "loader = DataLoader(ds, 32, True, None, None, 0)\n")
    line, _ = rewrite_statement(path, 1, ("DataLoader",), {"num_workers": 4},
                                positional=("dataset", "batch_size", "shuffle", "sampler", "batch_sampler",
                                            "num_workers"))
    assert line == "loader = DataLoader(ds, 32, True, None, None, 4)"


def test_a_call_inside_a_compound_statement_is_given_alone(tmp_path):
    path = write(tmp_path)
    line, name = rewrite_statement(path, 6, ("DataLoader",), {"num_workers": 2})
    assert (line, name) == ("DataLoader(val, batch_size=8, num_workers=2)", None)


def test_chained_calls_keep_the_rest_of_the_chain(tmp_path):
    path = write(tmp_path)
    line, name = rewrite_statement(path, 8, ("map",), {"num_parallel_calls": 16})
    assert name == "ds" and line == "ds = ds.map(parse, num_parallel_calls=16).batch(32)"


def test_multi_line_calls_are_found_from_any_of_their_lines(tmp_path):
    path = write(tmp_path)
    assert rewrite_call(path, 5, ("DataLoader",), {"num_workers": 1}) == \
        "DataLoader(ds, 32, True, pin_memory=True, num_workers=1)"  # the knobs set go last


def test_nothing_found_says_none(tmp_path):
    path = write(tmp_path)
    assert rewrite_statement(path, 2, ("DataLoader",), {"num_workers": 1}) is None  # an import line
    assert rewrite_statement(str(tmp_path / "missing.py"), 1, ("DataLoader",), {}) is None
    broken = write(tmp_path, "def broken(:\n")
    assert rewrite_call(broken, 1, (), {}) is None


def test_find_call_takes_the_innermost():
    import ast

    tree = ast.parse("x = outer(inner(1), 2)\n")
    assert find_call(tree, 1, ()).func.id == "inner"
    assert find_call(tree, 1, ("outer",)).func.id == "outer"
