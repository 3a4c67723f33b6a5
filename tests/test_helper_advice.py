"""Advice where a library's helper builds the loader (issue 23, item 1): the
script's call into the helper, the argument that carries the value and the flag
that feeds it; never a line of the library. What counts as the user's files
(record/userframes.py): under the script's directory or the working directory,
not site-packages, the standard library or the Python prefix; a package on
PYTHONPATH outside both is a library."""
import json
import os
import sys
import textwrap

from feedprof.frameworks.torch import paste_for
from feedprof.render.words import say
from feedprof.store import LoaderRecord
from feedprof.store.reasons import BuiltByHelper, HelperTakesNoSetting, SetByFlag
from feedprof.record.userframes import is_user_file, library_frames, user_call_chain
from tests.conftest import run_feedprof, write_script

# a library's helper as libraries write them: the loader's arguments in a dict,
# built by a class chosen at run time (so the value cannot be followed inside it)
LIBRARY = '''
from torch.utils.data import DataLoader


def create_loader(dataset, batch_size, is_training=False, num_workers=1, pin_memory=False):
    loader_class = DataLoader
    loader_args = dict(batch_size=batch_size, shuffle=is_training, num_workers=num_workers,
                       pin_memory=pin_memory)
    return loader_class(dataset, **loader_args)


def plain_loader(dataset, workers=0):
    return DataLoader(dataset, batch_size=4, num_workers=workers)
'''

TRAIN = '''
import argparse
import time

import torch
from torch.utils.data import Dataset

from fancylib import create_loader

parser = argparse.ArgumentParser(description="train")
parser.add_argument("-b", "--batch-size", type=int, default=4)
parser.add_argument("-j", "--workers", type=int, default=4, metavar="N")
parser.add_argument("--epochs", type=int, default=3)


class Slow(Dataset):
    def __len__(self):
        return 240

    def __getitem__(self, i):
        time.sleep(0.008)
        return torch.zeros(4)


def main():
    args = parser.parse_args()
    loader_train = create_loader(
        Slow(),
        batch_size=args.batch_size,
        is_training=True,
        num_workers=args.workers,
    )
    for epoch in range(args.epochs):
        for batch in loader_train:
            time.sleep(0.001)


if __name__ == "__main__":
    main()
'''


def line_of(text, fragment):
    return next(i for i, line in enumerate(textwrap.dedent(text).lstrip().splitlines(), 1) if fragment in line)


def project(tmp_path, library_dir="lib"):
    lib = tmp_path / library_dir / "fancylib"
    lib.mkdir(parents=True)
    write_script(lib, "__init__.py", LIBRARY)
    proj = tmp_path / "proj"
    proj.mkdir()
    return str(lib / "__init__.py"), write_script(proj, "train.py", TRAIN)


def test_which_files_are_the_users(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    proj = tmp_path / "proj"
    proj.mkdir()
    assert is_user_file(str(proj / "train.py"), str(proj))
    assert is_user_file(str(proj / "pkg" / "data.py"), str(proj))  # another module of the user's package
    assert is_user_file(str(tmp_path / "src" / "data.py"), str(proj))  # under the working directory
    monkeypatch.chdir(proj)
    assert not is_user_file(str(tmp_path / "lib" / "fancylib" / "__init__.py"), str(proj))  # PYTHONPATH elsewhere
    assert not is_user_file(str(proj / "venv" / "lib" / "site-packages" / "x.py"), str(proj))
    assert not is_user_file(os.__file__, str(proj))  # the standard library
    assert not is_user_file(json.__file__, str(proj))
    assert not is_user_file(sys.prefix + "/x.py", str(proj))


def test_library_frames_are_kept_apart(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    proj, lib = tmp_path / "proj", tmp_path / "lib"
    for d in (proj, lib):
        d.mkdir()
    (lib / "helper.py").write_text("import sys\n\ndef build():\n    return sys._getframe(0)\n")
    (proj / "main.py").write_text("from helper import build\n\n\ndef go():\n    return build()\n")
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.syspath_prepend(str(proj))
    monkeypatch.chdir(proj)
    import main
    frame = main.go()
    assert user_call_chain(str(proj), frame)[-1] == "main.py:5"
    assert library_frames(str(proj), frame) == (f"{lib / 'helper.py'}:4",)
    sys.modules.pop("main", None), sys.modules.pop("helper", None)


def advise(tmp_path, monkeypatch, argv, library_dir="lib", config=None):
    lib, script = project(tmp_path, library_dir)
    monkeypatch.chdir(os.path.dirname(script))
    built = line_of(LIBRARY, "return loader_class(")
    loader = LoaderRecord(loader_id=0, framework="torch", call_chain=(f"train.py:{line_of(TRAIN, 'create_loader(')}",),
                          built_in=(f"{lib}:{built}",), config={"num_workers": 2, "pin_memory": False})
    config = config or {"num_workers": 8, "pin_memory": False, "prefetch_factor": 2, "persistent_workers": True}
    return paste_for(config, loader, script, argv), lib


def test_the_advice_is_the_users_call_and_flag_not_the_library(tmp_path, monkeypatch):
    paste, lib = advise(tmp_path, monkeypatch, ["-j", "2", "--epochs", "1"])
    call_site = f"train.py:{line_of(TRAIN, 'create_loader(')}"
    assert paste.line == "python train.py --epochs 1 -j 8"  # -j as the user gave it, replaced
    flag = next(f for f in paste.findings if isinstance(f, SetByFlag))
    assert (flag.flag, flag.value, flag.used_at) == ("-j", "8", call_site)
    assert flag.declared_at == "train.py:%d" % line_of(TRAIN, 'add_argument("-j"')
    assert "run with `-j 8`" in say(flag)
    helper = next(f for f in paste.findings if isinstance(f, BuiltByHelper))
    assert (helper.call, helper.site) == ("create_loader", call_site)
    # persistent_workers cannot be passed through this helper: said, not guessed
    assert [f.knob for f in paste.findings if isinstance(f, HelperTakesNoSetting)] == ["persistent_workers"]
    assert "fancylib" not in paste.line


def test_a_helper_argument_left_to_its_default_is_added_at_the_users_call(tmp_path, monkeypatch):
    # installed in site-packages: never named in the paste line
    paste, lib = advise(tmp_path, monkeypatch, [], library_dir="venv/lib/python3/site-packages",
                        config={"num_workers": 8, "pin_memory": True})
    assert "site-packages" in lib and "site-packages" not in paste.line
    first = paste.line.splitlines()[0]
    assert first.startswith("loader_train = create_loader(Slow(), batch_size=args.batch_size")
    assert "pin_memory=True" in first and first.endswith(f"# train.py:{line_of(TRAIN, 'create_loader(')}")
    assert paste.line.splitlines()[-1] == "python train.py --workers 8"  # the flag's default (4) is not 8


def test_tune_names_the_script_call_and_flag(tmp_path, no_leftovers, torch):
    lib, script = project(tmp_path)
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--out", str(out), "--budget", "40", "--window-seconds", "0.6",
                         "--min-window-batches", "20", "--warmup-batches", "2", "--interval", "0.1", "train.py",
                         "-j", "0"], timeout=300, cwd=os.path.dirname(script),
                        env={"PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.dirname(lib)),
                                                            os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((out / "results.json").read_text())["recommendation"]
    site = f"train.py:{line_of(TRAIN, 'create_loader(')}"
    assert rec["loader_site"] == site
    n = rec["config"]["num_workers"]
    assert n >= 2 and f"python train.py -j {n}" in rec["paste_line"]
    assert "fancylib" not in rec["paste_line"] and "fancylib" not in proc.stdout.split("Paste this:")[1]
    assert f"run with `-j {n}`" in proc.stdout and f"your call {site}" in proc.stdout


PKG_DATA = '''
from torch.utils.data import DataLoader


def build_loader(dataset, cfg_workers, batch_size=8):
    return DataLoader(dataset, batch_size=batch_size, num_workers=cfg_workers)
'''

PKG_TRAIN = '''
import argparse

from mypkg.data import build_loader

parser = argparse.ArgumentParser()
parser.add_argument("-j", "--workers", default=2, type=int)
args = parser.parse_args()
loader = build_loader(range(100), args.workers)
'''


def test_a_helper_in_another_module_of_the_users_package(tmp_path, monkeypatch):
    """The helper's file is the user's: followed out to the flag that feeds it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mypkg").mkdir()
    write_script(tmp_path / "mypkg", "data.py", PKG_DATA)
    script = write_script(tmp_path, "train.py", PKG_TRAIN)
    chain = (f"train.py:{line_of(PKG_TRAIN, 'loader = build_loader')}",
             f"mypkg/data.py:{line_of(PKG_DATA, 'return DataLoader')}")
    loader = LoaderRecord(loader_id=0, framework="torch", call_chain=chain, config={"num_workers": 2})
    paste = paste_for({"num_workers": 6, "pin_memory": False, "prefetch_factor": 2, "persistent_workers": False},
                      loader, script, ["--workers=2"])
    assert paste.line == "python train.py --workers 6"
    flag = next(f for f in paste.findings if isinstance(f, SetByFlag))
    assert flag.used_at == chain[-1] and flag.declared_at == "train.py:%d" % line_of(PKG_TRAIN, "add_argument")


OWN_BATCHING = '''
import argparse
import time

import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()
data = np.random.rand(256, 8)
for epoch in range(args.epochs):
    for i in range(0, len(data), 16):
        batch = data[i:i + 16]
        time.sleep(0.002)
'''


def test_a_script_that_batches_by_itself_has_no_loader(tmp_path, no_leftovers):
    """No DataLoader, PyDataset or tf.data: "no data loader", exit 1, for tune and profile."""
    script = write_script(tmp_path, "train.py", OWN_BATCHING)
    for command in ("tune", "profile"):
        proc = run_feedprof([command, "--out", str(tmp_path / command), script, "--epochs", "1"],
                            cwd=str(tmp_path))
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert "no data loader was iterated" in proc.stdout + proc.stderr
        assert "has no loader settings to change" in proc.stdout + proc.stderr  # why, as nanoGPT's get_batch
        assert "Traceback" not in proc.stderr


def test_the_words_never_name_a_library_line(tmp_path, monkeypatch):
    paste, lib = advise(tmp_path, monkeypatch, ["-j", "2"], library_dir="venv/lib/python3/site-packages")
    words = " ".join(say(f) for f in paste.findings)
    assert "site-packages" not in words and "your call train.py:" in words


def test_nothing_to_change_through_the_helper_is_no_line_at_all(tmp_path, monkeypatch):
    """The flag's default (4) is the pick: the script's call as it is would be no advice."""
    paste, lib = advise(tmp_path, monkeypatch, [], config={"num_workers": 4, "pin_memory": False})
    assert paste.line == "" and not any(isinstance(f, SetByFlag) for f in paste.findings)


# timm's train.py: the loader's settings in dicts, splatted into a library's helper
# that takes **kwargs (timm.data.create_loader), fed by the script's flags (-j)
TIMM_LIBRARY = '''
from torch.utils.data import DataLoader


def create_loader(dataset, is_training=False, **kwargs):
    return DataLoader(dataset, shuffle=is_training, **kwargs)
'''

TIMM_TRAIN = '''
import argparse
import time

import torch
from torch.utils.data import Dataset

from timmlike.data import create_loader

parser = argparse.ArgumentParser(description="timm-like training")
parser.add_argument("-b", "--batch-size", type=int, default=4)
parser.add_argument("-j", "--workers", type=int, default=4, metavar="N")
parser.add_argument("--pin-mem", action="store_true", default=False)
parser.add_argument("--epochs", type=int, default=3)


class Slow(Dataset):
    def __len__(self):
        return 240

    def __getitem__(self, i):
        time.sleep(0.008)
        return torch.zeros(4)


def main():
    args = parser.parse_args()
    common_loader_kwargs = dict(
        pin_memory=args.pin_mem,
    )
    train_loader_kwargs = dict(
        batch_size=args.batch_size,
        is_training=True,
        num_workers=args.workers,
    )
    loader_train = create_loader(
        Slow(),
        **common_loader_kwargs,
        **train_loader_kwargs,
    )
    for epoch in range(args.epochs):
        for batch in loader_train:
            time.sleep(0.001)


if __name__ == "__main__":
    main()
'''


def timm_project(tmp_path, library=TIMM_LIBRARY, train=TIMM_TRAIN):
    """The helper installed in a virtual environment's site-packages, the script in its own directory."""
    lib = tmp_path / "venv" / "lib" / "python3" / "site-packages" / "timmlike"
    lib.mkdir(parents=True)
    write_script(lib, "__init__.py", "")
    helper = write_script(lib, "data.py", library)
    proj = tmp_path / "proj"
    proj.mkdir()
    return helper, write_script(proj, "train.py", train)


def runs_as_pasted(line):
    """Each line parses (a statement with ast, the command line as shell words) and no
    call passes a keyword by name that the script's dicts pass it too."""
    import ast
    import shlex

    for text in line.splitlines():
        if text.startswith("python "):
            assert shlex.split(text)
            continue
        for call in (n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Call)):
            named = [k.arg for k in call.keywords if k.arg]
            assert len(named) == len(set(named)), text
            if any(k.arg is None for k in call.keywords):  # beside the dicts: nothing they hold
                assert not set(named) & {"batch_size", "is_training", "num_workers", "pin_memory"}, text


def timm_advise(tmp_path, monkeypatch, config, argv, library=TIMM_LIBRARY, train=TIMM_TRAIN,
                ran_with=(("num_workers", 2), ("pin_memory", False))):
    helper, script = timm_project(tmp_path, library, train)
    monkeypatch.chdir(os.path.dirname(script))
    loader = LoaderRecord(loader_id=0, framework="torch",
                          call_chain=(f"train.py:{line_of(train, 'create_loader(')}",),
                          built_in=(f"{helper}:{line_of(library, 'return DataLoader(')}",),
                          config=dict(ran_with))
    return paste_for(config, loader, script, argv)


# timm's own train.py: its arguments come back from a function of the script's, with their text,
# and -j feeds its eval loader's create_loader too
TIMM_TRAIN_PARSE_ARGS = TIMM_TRAIN.replace("""def main():
    args = parser.parse_args()""", """def _parse_args():
    args = parser.parse_args()
    args_text = str(vars(args))
    return args, args_text


def main():
    args, args_text = _parse_args()""").replace("""    for epoch in range(args.epochs):""", """    eval_workers = args.workers
    eval_loader_kwargs = dict(batch_size=args.batch_size, num_workers=eval_workers)
    loader_eval = create_loader(Slow(), **common_loader_kwargs, **eval_loader_kwargs)
    for epoch in range(args.epochs):
        for batch in loader_eval:
            pass""")
# timm's create_loader turns persistent workers on by itself
TIMM_LIBRARY_PERSISTENT = """
from torch.utils.data import DataLoader


def create_loader(dataset, is_training=False, persistent_workers=True, **kwargs):
    return DataLoader(dataset, shuffle=is_training, persistent_workers=persistent_workers, **kwargs)
"""


def test_args_that_a_function_of_the_script_returns_are_followed_to_the_flag(tmp_path, monkeypatch):
    """timm's ``args, args_text = _parse_args()``: the flag is named, not a literal written into the dict."""
    assert "args, args_text = _parse_args()" in TIMM_TRAIN_PARSE_ARGS
    paste = timm_advise(tmp_path, monkeypatch, {"num_workers": 8, "pin_memory": False}, ["--epochs", "1"],
                        train=TIMM_TRAIN_PARSE_ARGS)
    assert paste.line == "python train.py --epochs 1 --workers 8"  # (-j where the command line said -j)
    flags = {f.knob: f for f in paste.findings if isinstance(f, SetByFlag)}
    assert (flags["num_workers"].flag, flags["num_workers"].value) == ("--workers", "8")


def test_no_workers_through_a_helper_that_turns_persistent_workers_on_says_to_turn_them_off(tmp_path, monkeypatch):
    """timm's create_loader(persistent_workers=True): with -j 0 alone its DataLoader raises
    (persistent_workers needs num_workers > 0), so the advice passes persistent_workers=False too."""
    paste = timm_advise(tmp_path, monkeypatch, {"num_workers": 0, "pin_memory": False}, ["--epochs", "1"],
                        library=TIMM_LIBRARY_PERSISTENT, train=TIMM_TRAIN_PARSE_ARGS,
                        ran_with=(("num_workers", 4), ("pin_memory", False), ("persistent_workers", True)))
    runs_as_pasted(paste.line)
    call_site = f"train.py:{line_of(TIMM_TRAIN_PARSE_ARGS, 'create_loader(')}"
    eval_site = f"train.py:{line_of(TIMM_TRAIN_PARSE_ARGS, 'loader_eval = create_loader(')}"
    assert paste.line.splitlines() == [
        f"loader_train = create_loader(Slow(), **common_loader_kwargs, **train_loader_kwargs, "
        f"persistent_workers=False)  # {call_site}",
        # the flag gives the eval loader no workers too: its create_loader is told the same
        f"loader_eval = create_loader(Slow(), **common_loader_kwargs, **eval_loader_kwargs, "
        f"persistent_workers=False)  # {eval_site}",
        "python train.py --epochs 1 --workers 0"]


def applied(script, paste_line):
    """The script with each pasted statement in place of the one at its ``# file:line``."""
    import ast

    text = open(script).read()
    lines = text.splitlines()
    statements = [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.stmt)]
    for pasted in reversed([p for p in paste_line.splitlines() if "  # train.py:" in p]):
        code, where = pasted.rsplit("  # train.py:", 1)
        at = min((n for n in statements if n.lineno == int(where)), key=lambda n: n.end_lineno - n.lineno)
        indent = lines[at.lineno - 1][:len(lines[at.lineno - 1]) - len(lines[at.lineno - 1].lstrip())]
        lines[at.lineno - 1:at.end_lineno] = [indent + code]
    return "\n".join(lines) + "\n"


def test_no_workers_through_timms_helper_runs_as_pasted(tmp_path, monkeypatch, e2e):
    """The advice above, applied as a user would (the statements replaced, the command run):
    both loaders run with no workers (before: ValueError, persistent_workers needs num_workers > 0)."""
    import subprocess
    import sys

    paste = timm_advise(tmp_path, monkeypatch, {"num_workers": 0, "pin_memory": False}, ["--epochs", "1"],
                        library=TIMM_LIBRARY_PERSISTENT, train=TIMM_TRAIN_PARSE_ARGS,
                        ran_with=(("num_workers", 4), ("pin_memory", False), ("persistent_workers", True)))
    script = tmp_path / "proj" / "train.py"
    script.write_text(applied(script, paste.line))
    command = paste.line.splitlines()[-1].split()[1:]  # python train.py ...
    site = tmp_path / "venv" / "lib" / "python3" / "site-packages"
    proc = subprocess.run([sys.executable, *command], cwd=script.parent, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(site)})
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_timms_dicts_of_loader_kwargs_are_followed_to_the_flag(tmp_path, monkeypatch):
    """Before: ``create_loader(..., **common_loader_kwargs, **train_loader_kwargs,
    num_workers=2)``, which Python refuses, and -j never named."""
    config = {"num_workers": 8, "pin_memory": True, "prefetch_factor": 2, "persistent_workers": True}
    paste = timm_advise(tmp_path, monkeypatch, config, ["-j", "2", "--epochs", "1"])
    runs_as_pasted(paste.line)
    call_site = f"train.py:{line_of(TIMM_TRAIN, 'create_loader(')}"
    assert paste.line.splitlines() == [
        f"loader_train = create_loader(Slow(), **common_loader_kwargs, **train_loader_kwargs, "
        f"persistent_workers=True)  # {call_site}",  # what no dict holds: passed on by **kwargs
        "python train.py --epochs 1 -j 8 --pin-mem"]
    flags = {f.knob: f for f in paste.findings if isinstance(f, SetByFlag)}
    assert (flags["num_workers"].flag, flags["num_workers"].value) == ("-j", "8")
    assert "run with `-j 8`" in say(flags["num_workers"]) and "run with `--pin-mem`" in say(flags["pin_memory"])
    assert "site-packages" not in paste.line


def test_timms_shape_with_the_scripts_own_settings_has_nothing_to_paste(tmp_path, monkeypatch):
    paste = timm_advise(tmp_path, monkeypatch, {"num_workers": 2, "pin_memory": False}, ["-j", "2"])
    assert paste.line == "" and not any(isinstance(f, SetByFlag) for f in paste.findings)


def test_tune_of_timms_shape_pastes_a_line_that_runs(tmp_path, no_leftovers, torch):
    """The real tune of the timm shape: the paste parses, passes no keyword twice,
    and names the script's flag -j."""
    helper, script = timm_project(tmp_path)
    out = tmp_path / "out"
    site_packages = os.path.dirname(os.path.dirname(helper))
    proc = run_feedprof(["tune", "--out", str(out), "--budget", "40", "--window-seconds", "0.6",
                         "--min-window-batches", "20", "--warmup-batches", "2", "--interval", "0.1", "train.py",
                         "-j", "0"], timeout=300, cwd=os.path.dirname(script),
                        env={"PYTHONPATH": os.pathsep.join([site_packages, os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((out / "results.json").read_text())["recommendation"]
    n = rec["config"]["num_workers"]
    assert n >= 2, rec
    runs_as_pasted(rec["paste_line"])
    assert f"python train.py -j {n}" in rec["paste_line"] and "num_workers=" not in rec["paste_line"]
    assert f"run with `-j {n}`" in proc.stdout and "Paste this:" in proc.stdout
    assert "already the best found" not in proc.stdout and "site-packages" not in rec["paste_line"]
