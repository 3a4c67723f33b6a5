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


def advise(tmp_path, *fragments, config=EIGHT, argv=(), text=SCRIPT, **record):
    path = tmp_path / "train.py"
    path.write_text(text)
    chain = tuple(f"train.py:{line_of(text, f)}" for f in fragments)
    loader = LoaderRecord(loader_id=0, framework="torch", call_chain=chain,
                          config={"num_workers": 0, "pin_memory": False}, **record)
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
    assert advise(tmp_path, "d = DataLoader", text=text, config=zero).line == \
        "d = DataLoader(range(10), num_workers=0)  # train.py:2"
