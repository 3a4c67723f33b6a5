"""How the command line splits feedprof's arguments from the script's, as profilers do
(``python -m cProfile train.py ARGS``): everything after SCRIPT is the script's, feedprof's
options go before it, ``--`` still separates them and still introduces a launch command.
In-process (the run itself is replaced by a stand-in that says what it was given), except
the last test, which runs each command for real."""
import json
import sys

import pytest

from tests.conftest import run_feedprof, write_script


def _split(argv):
    from feedprof.cliargs import build_parser, split_script_args

    return split_script_args(argv, build_parser())


@pytest.mark.parametrize("argv, ours, theirs", [
    (["profile", "train.py", "--epochs", "1"], ["profile", "train.py"], ["--epochs", "1"]),
    (["tune", "--budget", "30", "train.py", "--lr", "0.1", "-x"], ["tune", "--budget", "30", "train.py"],
     ["--lr", "0.1", "-x"]),
    (["profile", "--", "torchrun", "--nproc-per-node", "2", "train.py"], ["profile"],
     ["torchrun", "--nproc-per-node", "2", "train.py"]),
    (["profile", "train.py", "--", "--flag"], ["profile", "train.py"], ["--flag"]),  # -- just after SCRIPT: dropped
    (["tune", "--online", "train.py", "--help"], ["tune", "--online", "train.py"], ["--help"]),  # the script's own
    (["tune", "--out", "d", "train.py", "--out", "e", "--", "x"], ["tune", "--out", "d", "train.py"],
     ["--out", "e", "--", "x"]),  # after SCRIPT, an option of feedprof's is the script's, and so is a later --
    (["tune", "--out=d", "--bud", "30", "train.py"], ["tune", "--out=d", "--bud", "30", "train.py"], []),
    (["profile", "--interval", "-1", "train.py"], ["profile", "--interval", "-1", "train.py"], []),
    (["tune", "--online", "--", "srun", "-n", "2", "python", "x.py"], ["tune", "--online"],
     ["srun", "-n", "2", "python", "x.py"]),
    (["report", "a.json", "-o", "r.html"], ["report", "a.json", "-o", "r.html"], []),
    (["tune", "--resume", "d"], ["tune", "--resume", "d"], []),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_everything_after_the_script_is_the_scripts(argv, ours, theirs):
    assert _split(argv) == (ours, theirs)


class Reached(Exception):
    """The stand-in for a run: what feedprof would have run."""


@pytest.fixture
def reached(monkeypatch):
    """Replaces the runs of profile, tune and tune --online: each raises Reached with
    (what ran, the script's arguments, the launch command)."""
    import feedprof.app as app

    def profile(script, argv, out_dir, opts, gpu=True, launch=None):
        raise Reached("profile", script, list(argv), launch)

    def tune(job, options, outputs=None):
        raise Reached("tune", job.script, list(job.argv), job.launch)

    def online(script, argv, out_dir, opts, launch=None, **kw):
        raise Reached("online", script, list(argv), launch)

    monkeypatch.setattr(app, "run_profile", profile)
    monkeypatch.setattr(app, "run_tune", tune)
    monkeypatch.setattr(app, "run_online_tune", online)


@pytest.mark.parametrize("command, what", [(["profile"], "profile"), (["tune", "--budget", "30"], "tune"),
                                           (["tune", "--online", "--explore", "10"], "online")])
def test_each_command_that_runs_a_script_gives_it_its_arguments(tmp_path, cli, reached, command, what):
    script = write_script(tmp_path, "train.py", "print('never run')\n")
    with pytest.raises(Reached) as got:
        cli([*command, "--out", str(tmp_path / "out"), script, "--epochs", "1", "--lr", "0.1", "-x", "--help"])
    assert got.value.args == (what, script, ["--epochs", "1", "--lr", "0.1", "-x", "--help"], None)
    with pytest.raises(Reached) as got:
        cli([*command, "--out", str(tmp_path / "out"), script, "--", "--flag"])
    assert got.value.args[2] == ["--flag"]


@pytest.mark.parametrize("command", [["profile"], ["tune"], ["tune", "--online"]])
def test_a_launch_command_still_goes_after_dashes(tmp_path, cli, reached, command):
    script = write_script(tmp_path, "train.py", "print('never run')\n")
    with pytest.raises(Reached) as got:
        cli([*command, "--out", str(tmp_path / "out"), "--", sys.executable, script, "--epochs", "1"])
    launch = got.value.args[3]
    assert launch is not None and launch.command == (sys.executable, script, "--epochs", "1")
    assert got.value.args[2] == []


def test_an_option_of_feedprofs_after_the_script_goes_to_the_script_and_is_said(tmp_path, cli, reached):
    script = write_script(tmp_path, "train.py", "print('never run')\n")
    with pytest.raises(Reached) as got:
        cli(["profile", script, "--out", str(tmp_path / "mine"), "--", "x"])
    assert got.value.args[2] == ["--out", str(tmp_path / "mine"), "--", "x"]


def test_the_note_on_an_option_after_the_script_is_one_line(tmp_path, capsys, reached):
    from feedprof.cli import main

    script = write_script(tmp_path, "train.py", "print('never run')\n")
    with pytest.raises(Reached):
        main(["tune", "--online", "--out", str(tmp_path / "out"), script, "--budget", "30", "--epochs", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["feedprof: --budget after train.py goes to the script, as everything after it does; "
                   "feedprof's own options go before the script"]


def test_the_scripts_own_help_asked_for_after_it_is_no_note(tmp_path, capsys, reached):
    from feedprof.cli import main

    script = write_script(tmp_path, "train.py", "print('never run')\n")
    with pytest.raises(Reached) as got:
        main(["tune", "--online", "--out", str(tmp_path / "out"), script, "--help"])
    assert got.value.args[2] == ["--help"] and capsys.readouterr().err == ""


@pytest.mark.parametrize("args, message", [
    (["profile"], "give the training script, then its own arguments"),
    (["tune", "--online", "--out", "OUT"], "give the training script, then its own arguments"),
    (["tune", "--budget", "30"], "or a launch command after --"),
    (["profile", "missing.py", "--epochs", "1"], "no such script: missing.py"),
    (["tune", "sh", "-c", "true"], "sh is a command, not a training script: a launch command goes after --"),
    (["profile", "--epochs", "1", "x.py"], "unrecognized arguments: --epochs"),
    (["tune", "--online", "--budget", "30", "x.py"], "--budget is for offline tunes"),
    (["tune", "--online", "--loader-timeout", "30", "x.py"], "--loader-timeout is for offline tunes"),
    (["tune", "--online", "--min-window-batches", "9", "x.py"], "--min-window-batches is for offline tunes"),
    (["tune", "--online", "--window-sec", "9", "x.py"], "--window-seconds is for offline tunes"),
    (["tune", "--explore", "30", "x.py"], "--explore goes with --online"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_bad_usage_says_what_goes_where_in_one_line(tmp_path, cli, args, message):
    (tmp_path / "x.py").write_text("print('never run')\n")
    proc = cli([a.replace("OUT", str(tmp_path / "out")) for a in args], cwd=str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_online_flags_that_apply_online_are_taken(tmp_path, cli, reached):
    script = write_script(tmp_path, "train.py", "print('never run')\n")
    with pytest.raises(Reached):
        cli(["tune", "--online", "--out", str(tmp_path / "out"), "--interval", "0.5", "--no-gpu", "--quiet",
             "--max-workers", "4", script])


@pytest.mark.parametrize("command", ["profile", "tune"])
def test_help_shows_the_script_then_its_arguments(cli, command):
    proc = cli([command, "--help"])
    assert proc.returncode == 0
    assert f"usage: feedprof {command} [options] train.py [args ...]" in proc.stdout
    assert f"feedprof {command} [options] -- LAUNCH COMMAND" in proc.stdout


SEES = """
import json, sys
from torch.utils.data import DataLoader
with open(sys.argv[sys.argv.index("--record") + 1], "w") as fh:
    json.dump(sys.argv[1:], fh)
for epoch in range(int(sys.argv[sys.argv.index("--epochs") + 1])):
    for _ in DataLoader(list(range(2000)), batch_size=4):
        pass
"""


@pytest.mark.parametrize("command", [["profile", "--window-batches", "30"],
                                     ["tune", "--budget", "20", "--window-seconds", "0.5", "--quiet"],
                                     ["tune", "--online", "--quiet"]], ids=["profile", "tune", "tune --online"])
def test_the_script_gets_its_arguments_for_real(tmp_path, command, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", SEES)
    record = tmp_path / "argv.json"
    proc = run_feedprof([*command, "--out", str(tmp_path / "out"), script, "--epochs", "1", "--record", str(record)],
                        timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(record.read_text()) == ["--epochs", "1", "--record", str(record)]
