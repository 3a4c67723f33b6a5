"""tune --online's command line, in-process (no job is run)."""
import pytest

from conftest import write_script


@pytest.mark.parametrize("args, message", [
    (["--explore", "30"], "--explore goes with --online"),
    (["--allow-rng-change"], "--allow-rng-change goes with --online"),
    (["--allow-resharding"], "--allow-resharding goes with --online"),
    (["--online", "--explore", "0"], "--explore"),
    (["--online", "--explore", "150%"], "--explore"),
    (["--online", "--explore", "soon"], "--explore"),
    (["--online", "--resume", "somewhere"], "--resume is for offline tunes"),
    (["--online", "--loader", "nowhere"], "--loader expects FILE:LINE"),
])
def test_bad_online_flags_are_one_line_and_exit_2(tmp_path, cli, args, message):
    script = write_script(tmp_path, "train.py", "print('never run')\n")
    proc = cli(["tune", "--out", str(tmp_path / "out"), *args, script])
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_a_missing_script_is_a_usage_error_online_too(tmp_path, cli):
    proc = cli(["tune", "--online", str(tmp_path / "nope.py")])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("text, want", [("60", (60.0, None)), ("45s", (45.0, None)), ("10%", (None, 0.1))])
def test_explore_takes_seconds_or_a_share(text, want):
    from feedprof.cliargs import explore_budget

    assert explore_budget(text) == want
