"""Where a loader setting lives in the script, and the advice that sets it
there (frameworks/origin.py, paste.py): real files, read as the tune reads them."""
import textwrap

from feedprof.frameworks.torch import paste_for
from feedprof.store.reasons import SetByFlag, SetElsewhere, SettingSourceUnknown
from feedprof.render.words import say
from feedprof.store import LoaderRecord

SCRIPT = textwrap.dedent('''
    import argparse
    import os
    from dataclasses import dataclass
    from torch.utils.data import DataLoader

    WORKERS = 0


    @dataclass
    class Config:
        batch: int = 4
        workers: int = 0


    def make_loader(ds, workers, pin=False):
        return DataLoader(ds, batch_size=4, num_workers=workers, pin_memory=pin)


    class Data:
        def __init__(self, ds, num_workers=0):
            self.ds = ds
            self.num_workers = num_workers

        def train_dataloader(self):
            return DataLoader(self.ds, num_workers=self.num_workers)


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--workers", "-w", type=int, default=0)
        parser.add_argument("--pin", action="store_true")
        args = parser.parse_args()
        a = DataLoader(range(10), batch_size=2, num_workers=args.workers)
        b = make_loader(range(10), args.workers, pin=args.pin)
        c = make_loader(range(10), 0)
        cfg = Config(workers=2)
        d = DataLoader(range(10), num_workers=cfg.workers)
        e = DataLoader(range(10), num_workers=WORKERS)
        data = Data(range(10), num_workers=args.workers)
        data.train_dataloader()
        f = DataLoader(range(10), num_workers=int(os.environ.get("W", 0)))
        g = DataLoader(range(10), 2, False, None, None, 0)
    ''').lstrip()

EIGHT = {"num_workers": 8, "pin_memory": False, "prefetch_factor": 2, "persistent_workers": True}


def line_of(text, fragment):
    return next(i for i, line in enumerate(text.splitlines(), 1) if fragment in line)


def advise(tmp_path, *fragments, config=EIGHT, argv=(), text=SCRIPT, own=None, **record):
    path = tmp_path / "train.py"
    path.write_text(text)
    chain = tuple(f"train.py:{line_of(text, f)}" for f in fragments)
    loader = LoaderRecord(loader_id=0, framework="torch", call_chain=chain,
                          config=own or {"num_workers": 0, "pin_memory": False}, **record)
    return paste_for(config, loader, str(path), list(argv))


def test_an_argparse_flag_becomes_a_command_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paste = advise(tmp_path, "a = DataLoader", argv=["--epochs", "3", "--workers", "2"])
    statement, command = paste.line.splitlines()
    # the flag's expression stays in the statement; the knobs without a flag are set there
    assert statement == (f"a = DataLoader(range(10), batch_size=2, num_workers=args.workers, "
                         f"persistent_workers=True)  # train.py:{line_of(SCRIPT, 'a = DataLoader')}")
    assert command == "python train.py --epochs 3 --workers 8"  # replaced, not repeated
    flag = next(f for f in paste.findings if isinstance(f, SetByFlag))
    assert (flag.knob, flag.flag, flag.value, flag.default) == ("num_workers", "--workers", "8", "0")
    assert flag.declared_at == "train.py:%d" % line_of(SCRIPT, 'add_argument("--workers"')
    assert "run with `--workers 8`" in say(flag)
    # the flag feeds two more places: running with it changes them too, and the words say so
    assert flag.also_used_at == tuple(f"train.py:{line_of(SCRIPT, f)}" for f in ("b = make_loader", "data = Data("))


def test_a_parameter_is_followed_to_the_callers_argument(tmp_path):
    paste = advise(tmp_path, "b = make_loader", "return DataLoader(ds, batch_size=4",
                   config={**EIGHT, "pin_memory": True})
    flags = {f.flag: f.value for f in paste.findings if isinstance(f, SetByFlag)}
    assert flags == {"--workers": "8", "--pin": ""}  # a switch is passed bare
    assert paste.line.splitlines()[-1].endswith("--workers 8 --pin")
    # a literal passed in (or a parameter left to its default): set in the caller's call
    paste = advise(tmp_path, "c = make_loader", "return DataLoader(ds, batch_size=4",
                   config={**EIGHT, "pin_memory": True})
    assert f"c = make_loader(range(10), 8, pin=True)  # train.py:{line_of(SCRIPT, 'c = make_loader')}" \
        in paste.line.splitlines()
    elsewhere = [f for f in paste.findings if isinstance(f, SetElsewhere)]
    assert {(f.knob, f.keyword, f.call) for f in elsewhere} == {("num_workers", "workers", "make_loader"),
                                                                ("pin_memory", "pin", "make_loader")}


def test_config_fields_constants_and_attributes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "cfg = Config(workers=8)" in advise(tmp_path, "d = DataLoader").line
    assert "WORKERS = 8  # train.py:" in advise(tmp_path, "e = DataLoader").line
    # self.num_workers <- Data(..., num_workers=args.workers) <- --workers (a Lightning DataModule's way)
    paste = advise(tmp_path, "data.train_dataloader()", "return DataLoader(self.ds")
    assert paste.line.splitlines()[-1] == "python train.py --workers 8"


def test_what_cannot_be_followed_is_said_and_set_at_the_call(tmp_path):
    paste = advise(tmp_path, "f = DataLoader")
    assert "num_workers=8" in paste.line and "os.environ" not in paste.line
    unknown = next(f for f in paste.findings if isinstance(f, SettingSourceUnknown))
    assert unknown.expression == "int(os.environ.get('W', 0))"
    assert "cannot tell where num_workers gets its value" in say(unknown)
    # no call at the site (the loader is built inside a library): the keywords, said plainly
    paste = advise(tmp_path, "WORKERS = 0")
    assert paste.line.startswith("DataLoader(dataset, num_workers=8")
    assert [f.expression for f in paste.findings if isinstance(f, SettingSourceUnknown)] == [""]


def test_positional_knobs_are_replaced_in_place_and_unchanged_ones_left_alone(tmp_path):
    paste = advise(tmp_path, "g = DataLoader")
    assert paste.line.startswith("g = DataLoader(range(10), 2, False, None, None, 8, persistent_workers=True)")
    # prefetch_factor=2 is DataLoader's own default with workers: not written
    assert "prefetch_factor" not in paste.line


def test_training_arguments_are_the_paste_line_for_a_trainer(tmp_path):
    text = textwrap.dedent('''
        from transformers import Trainer, TrainingArguments

        def main(workers=0):
            args = TrainingArguments(output_dir="out", per_device_train_batch_size=4,
                                     dataloader_num_workers=workers, report_to="none")
            Trainer(model=None, args=args).train()

        main()
        ''').lstrip()
    paste = advise(tmp_path, "main()", "args = TrainingArguments", "Trainer(model", text=text,
                   config={**EIGHT, "pin_memory": True}, settings_call="TrainingArguments",
                   config_sites=("train.py:8", "train.py:4"))
    lines = paste.line.splitlines()
    assert lines[0] == ("args = TrainingArguments(output_dir='out', per_device_train_batch_size=4, "
                        "dataloader_num_workers=workers, report_to='none', dataloader_persistent_workers=True)"
                        "  # train.py:4")  # dataloader_pin_memory=True is TrainingArguments' default
    assert lines[1] == "main(workers=8)  # train.py:8"


def test_training_arguments_from_the_command_line_become_flags(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = textwrap.dedent('''
        from transformers import HfArgumentParser, TrainingArguments

        (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
        ''').lstrip()
    paste = advise(tmp_path, "parse_args", text=text, config=EIGHT, argv=["--output_dir", "out"],
                   settings_call="TrainingArguments", config_sites=("train.py:3",))
    assert paste.line == ("python train.py --output_dir out --dataloader_num_workers 8 "
                          "--dataloader_persistent_workers True")
    assert {f.flag for f in paste.findings if isinstance(f, SetByFlag)} == {
        "--dataloader_num_workers", "--dataloader_persistent_workers"}


TFDATA_SCRIPT = textwrap.dedent('''
    import tensorflow as tf
    ds = tf.data.Dataset.range(64).map(load, num_parallel_calls=2).batch(8).prefetch(1)
    other = tf.data.Dataset.range(64).map(load, num_parallel_calls=2).batch(8)
''')


def test_a_tfdata_line_that_prefetches_has_its_buffer_set_not_a_second_prefetch(tmp_path):
    """The paste line of a tf.data pick: the map's knobs in the script's own
    statement; its own prefetch's buffer set, or one prefetch added after it."""
    from types import SimpleNamespace

    from feedprof.frameworks.tfdata_paste import paste_line

    script = tmp_path / "train.py"
    script.write_text(TFDATA_SCRIPT)
    pick = {"num_parallel_calls": 28, "prefetch": "AUTOTUNE", "private_threadpool_size": 28}
    line = paste_line(pick, SimpleNamespace(call_chain=("train.py:3",)), str(script))
    assert line.count("prefetch(") == 1 and ".batch(8).prefetch(tf.data.AUTOTUNE)" in line
    assert "map(load, num_parallel_calls=28)" in line and "private_threadpool_size = 28" in line
    line = paste_line(pick, SimpleNamespace(call_chain=("train.py:4",)), str(script))
    assert line.startswith("options = tf.data.Options(); options.threading.private_threadpool_size = 28; ")
    assert line.endswith("other = tf.data.Dataset.range(64).map(load, num_parallel_calls=28).batch(8)"
                         ".prefetch(tf.data.AUTOTUNE).with_options(options)  # train.py:4")


def test_the_scripts_start_method_is_kept_and_dropped_without_workers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = ("from torch.utils.data import DataLoader\n"
            "d = DataLoader(range(10), num_workers=1, multiprocessing_context='spawn')\n")
    line = advise(tmp_path, "d = DataLoader", text=text).line
    assert "multiprocessing_context='spawn'" in line and "num_workers=8" in line
    # the DataLoader refuses a start method without workers (ValueError): it goes with them
    zero = {"num_workers": 0, "pin_memory": False, "prefetch_factor": None, "persistent_workers": False}
    assert advise(tmp_path, "d = DataLoader", text=text, config=zero, own={"num_workers": 1}).line == \
        "d = DataLoader(range(10), num_workers=0)  # train.py:2"


# ---------------------------------------------- through dicts, **kwargs and partial

KWARGS_SCRIPT = textwrap.dedent('''
    import argparse
    from functools import partial

    from torch.utils.data import DataLoader


    def make_loader(ds, **kwargs):
        return DataLoader(ds, batch_size=4, **kwargs)


    def build(ds, loader_kwargs):
        return DataLoader(ds, **loader_kwargs)


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("-j", "--workers", type=int, default=2)
        parser.add_argument("--pin-mem", action="store_true")
        args = parser.parse_args()
        a = make_loader(range(10), num_workers=args.workers)
        loader_kwargs = {"batch_size": 4, "num_workers": args.workers, "pin_memory": args.pin_mem}
        b = DataLoader(range(10), shuffle=True, **loader_kwargs)
        make = partial(DataLoader, batch_size=4, num_workers=args.workers)
        c = make(range(10))
        kw = dict(batch_size=4)
        kw["num_workers"] = args.workers
        kw.update(pin_memory=False)
        d = DataLoader(range(10), **kw)
        e_kwargs = dict(batch_size=4, num_workers=2)
        e = DataLoader(range(10), **e_kwargs)
        f = DataLoader(range(10), **get_kwargs())
        base = {"num_workers": 1}
        if args.workers:
            base.update({"num_workers": args.workers})
        else:
            base["num_workers"] = 0
        g = DataLoader(range(10), **base)
        h = DataLoader(range(10), batch_size=4, **{"shuffle": True})
        pinned = {"pin_memory": True, "num_workers": 2}
        i = DataLoader(range(10), **pinned)
        j = build(range(10), dict(batch_size=4, num_workers=args.workers))
    ''').lstrip()

PIN = {**EIGHT, "pin_memory": True}


def runs_as_pasted(paste):
    """Every line parses (statements with ast, the command line as shell words) and
    no call in it passes a keyword twice by name."""
    import ast
    import shlex

    for line in paste.line.splitlines():
        if line.startswith("python "):
            assert shlex.split(line)
            continue
        for call in (n for n in ast.walk(ast.parse(line)) if isinstance(n, ast.Call)):
            named = [k.arg for k in call.keywords if k.arg]
            assert len(named) == len(set(named)), line
    return paste.line.splitlines()


def kw_advise(tmp_path, *fragments, config=PIN, argv=("-j", "2")):
    return advise(tmp_path, *fragments, text=KWARGS_SCRIPT, config=config, argv=argv)


def at(fragment):
    return f"train.py:{line_of(KWARGS_SCRIPT, fragment)}"


def test_a_helper_that_takes_kwargs_passes_the_flag_through(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paste = kw_advise(tmp_path, "a = make_loader", "return DataLoader(ds, batch_size=4, **kwargs)")
    assert runs_as_pasted(paste) == [
        f"a = make_loader(range(10), num_workers=args.workers, pin_memory=True, persistent_workers=True)  "
        f"# {at('a = make_loader')}", "python train.py -j 8"]
    flag = next(f for f in paste.findings if isinstance(f, SetByFlag))
    assert (flag.knob, flag.flag, flag.value) == ("num_workers", "-j", "8")


def test_a_dict_passed_into_a_function_is_looked_into_where_it_is_passed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paste = kw_advise(tmp_path, "j = build", "return DataLoader(ds, **loader_kwargs)")
    assert runs_as_pasted(paste) == [
        f"return DataLoader(ds, **loader_kwargs, pin_memory=True, persistent_workers=True)  "
        f"# {at('return DataLoader(ds, **loader_kwargs)')}", "python train.py -j 8"]


def test_a_dict_of_loader_kwargs_is_followed_to_its_flags(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paste = kw_advise(tmp_path, "b = DataLoader")
    lines = runs_as_pasted(paste)
    # what the dict lacks is added beside it; what it holds comes from the flags
    assert lines == [f"b = DataLoader(range(10), shuffle=True, **loader_kwargs, persistent_workers=True)  "
                     f"# {at('b = DataLoader')}", "python train.py -j 8 --pin-mem"]
    assert {f.flag for f in paste.findings if isinstance(f, SetByFlag)} == {"-j", "--pin-mem"}


def test_a_partial_is_followed_and_changed_where_it_is_made(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paste = kw_advise(tmp_path, "c = make(")
    assert runs_as_pasted(paste) == [
        f"make = partial(DataLoader, batch_size=4, num_workers=args.workers, pin_memory=True, "
        f"persistent_workers=True)  # {at('make = partial')}", "python train.py -j 8"]


def test_a_dict_updated_before_the_call_is_changed_where_it_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paste = kw_advise(tmp_path, "d = DataLoader")
    lines = runs_as_pasted(paste)
    assert f"kw.update(pin_memory=True)  # {at('kw.update')}" in lines
    assert f"d = DataLoader(range(10), **kw, persistent_workers=True)  # {at('d = DataLoader')}" in lines
    assert lines[-1] == "python train.py -j 8"  # kw["num_workers"] = args.workers
    # a literal in the dict is set in the dict, not beside it
    paste = kw_advise(tmp_path, "e = DataLoader", config=EIGHT)
    lines = runs_as_pasted(paste)
    assert f"e_kwargs = dict(batch_size=4, num_workers=8)  # {at('e_kwargs = dict')}" in lines
    assert not any("DataLoader" in line and "num_workers" in line for line in lines)
    assert any(isinstance(f, SetElsewhere) and f.site == at("e_kwargs = dict") for f in paste.findings)
    paste = kw_advise(tmp_path, "i = DataLoader")
    assert runs_as_pasted(paste) == [f"i = DataLoader(range(10), **pinned, persistent_workers=True)  # {at('i = ')}",
                                     f"pinned = {{'pin_memory': True, 'num_workers': 8}}  # {at('pinned = ')}"]


def test_a_dict_that_cannot_be_read_is_said_never_appended_to(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paste = kw_advise(tmp_path, "f = DataLoader", config=EIGHT)
    assert paste.line == ""  # any keyword may be in what get_kwargs() returns
    unknown = {f.knob: f for f in paste.findings if isinstance(f, SettingSourceUnknown)}
    assert set(unknown) == {"num_workers", "prefetch_factor", "persistent_workers"}
    assert unknown["num_workers"].left_out and unknown["num_workers"].expression == "**get_kwargs()"
    words = say(unknown["num_workers"])
    assert "set num_workers=8 where get_kwargs() is made" in words and "Python refuses a keyword passed twice" in words
    # num_workers is written in two places (if/else): not followed; the dict is read for the rest
    paste = kw_advise(tmp_path, "g = DataLoader", config=EIGHT)
    assert runs_as_pasted(paste) == [f"g = DataLoader(range(10), **base, persistent_workers=True)  # {at('g = ')}"]
    unknown = [f for f in paste.findings if isinstance(f, SettingSourceUnknown)]
    assert [(f.knob, f.expression, f.left_out) for f in unknown] == [("num_workers", "**base", True)]


def test_a_splat_that_lacks_the_keyword_gets_it_beside(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paste = kw_advise(tmp_path, "h = DataLoader", config=EIGHT)
    assert runs_as_pasted(paste) == [
        f"h = DataLoader(range(10), batch_size=4, **{{'shuffle': True}}, num_workers=8, persistent_workers=True)  "
        f"# {at('h = DataLoader')}"]


def test_a_line_that_would_pass_a_keyword_twice_is_withheld_and_said(tmp_path, monkeypatch):
    """The check behind the tracer: a plan that adds a keyword beside a splat that
    passes it is not shown; the words say what to set, and where."""
    from feedprof.frameworks import paste as module
    from feedprof.store.reasons import PasteLineWithheld

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(KWARGS_SCRIPT)
    site = at("b = DataLoader")
    call = module.Call(chain=(site,), names=("DataLoader",),
                       settings=(module.Setting("num_workers", "num_workers", 8),))
    at_the_call = module.AtCall(str(tmp_path / "train.py"), line_of(KWARGS_SCRIPT, "b = DataLoader"), ("DataLoader",),
                                "num_workers")  # a tracer that does not look into **loader_kwargs
    monkeypatch.setattr(module.Tracer, "origin", lambda self, *args: at_the_call)
    found = module.paste([call], str(tmp_path / "train.py"))
    assert found.line == ""
    withheld = next(f for f in found.findings if isinstance(f, PasteLineWithheld))
    assert (withheld.site, withheld.detail, withheld.settings) == (site, "num_workers", {"num_workers": 8})
    assert "would pass num_workers twice to DataLoader(...)" in say(withheld)


def test_a_knob_the_script_s_own_expression_gives_already_is_never_written_over_it(tmp_path, monkeypatch):
    """The advice keeps the script's own settings (a held loader's count equal to its own, say): the
    paste would only replace `args.workers if ... else 0` with the 0 it gave, dropping the flag."""
    monkeypatch.chdir(tmp_path)
    text = ("import argparse\nfrom torch.utils.data import DataLoader\np = argparse.ArgumentParser()\n"
            "p.add_argument('--workers', type=int)\nargs = p.parse_args()\n"
            "loader = DataLoader(range(10), num_workers=args.workers if args.workers is not None else 0)\n")
    own = {"num_workers": 0, "pin_memory": False, "prefetch_factor": None, "persistent_workers": False}
    assert advise(tmp_path, "loader = DataLoader", text=text, config=own, own=own).line == ""
    changed = advise(tmp_path, "loader = DataLoader", text=text, config=dict(own, pin_memory=True), own=own).line
    assert "pin_memory=True" in changed and "args.workers if args.workers is not None else 0" in changed
