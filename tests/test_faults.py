"""Faults, interrupts and bad input, against the real CLI: the right exit code
and message, no feedprof traceback, nothing left running, and what was
measured kept (readable by `feedprof report`)."""
import json
import os
import resource
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, feedprof_args, run_feedprof, write_script
from tests.scripts import torch_loop


QUICK = ["--window-batches", "40", "--warmup-batches", "2", "--interval", "0.1"]
TUNE_QUICK = ["--window-seconds", "0.6", "--min-window-batches", "20", "--warmup-batches", "2",
              "--interval", "0.1", "--quiet"]


def no_feedprof_traceback(stderr):
    """The script's own traceback may appear; feedprof's frames never do."""
    return "feedprof/" not in stderr and "feedprof\\" not in stderr


def profile(tmp_path, script, *extra):
    out = tmp_path / "out"
    proc = run_feedprof(feedprof_args(["profile"], script, "--out", str(out), *QUICK, *extra))
    return proc, out


# ------------------------------------------------------------ the script


@pytest.mark.parametrize("body,exit_code,message", [
    ("def broken(:\n    pass\n", 1, "SyntaxError"),
    ("import a_module_that_does_not_exist\n", 1, "ModuleNotFoundError: No module named 'a_module_that_does_not_exist'"),
    ("import sys\nsys.exit(3)\n", 3, "sys.exit(3)"),  # its own status, as `time` does
    ("print('no loader here')\n", 1, "the script ended without iterating a data loader"),
])
def test_script_faults(tmp_path, body, exit_code, message, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", body)
    proc, out = profile(tmp_path, script)
    assert proc.returncode == exit_code, proc.stderr
    assert message in proc.stderr
    assert no_feedprof_traceback(proc.stderr)
    assert (out / "run.json").exists() and run_feedprof(["report", str(out / "run.json")]).returncode == 0


@pytest.mark.parametrize("command", ["profile", "tune"])
@pytest.mark.parametrize("content", [b"\x7fELF\x02\x01\x01\x00\x00\x00binary", "print('é')\n".encode("latin-1")])
def test_a_file_that_is_not_python(tmp_path, command, content, cli):
    path = tmp_path / "train.py"
    path.write_bytes(content)
    proc = cli([command, "--out", str(tmp_path / "out"), str(path)])
    assert proc.returncode == 2
    assert "is not a Python script" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_script_that_finishes_before_the_window_is_measured(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", torch_loop(load_ms=1, step_ms=1, epochs=1, n=40))
    proc, out = profile(tmp_path, script, "--window-batches", "500")
    assert proc.returncode == 0, proc.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["window"]["end"] == "script_ended"
    assert [n for n in run["notes"] if n["code"] == "window_not_reached"] == [
        {"code": "window_not_reached", "steady_batches": run["summary"]["batches_measured"], "window_batches": 500}]
    assert "ended before the window was measured" in proc.stdout


def test_a_script_that_fails_after_its_batches_keeps_the_window_note(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", torch_loop(load_ms=1, step_ms=1, epochs=1, n=40)
                          + "raise RuntimeError('after the loop')\n")
    proc, out = profile(tmp_path, script, "--window-batches", "500")
    run = json.loads((out / "run.json").read_text())
    assert run["outcome"]["state"] == "failed" and "after the loop" in proc.stderr
    assert [n["code"] for n in run["notes"]].count("window_not_reached") == 1
    assert "ended before the window was measured" in proc.stdout


def test_script_that_never_builds_a_loader(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", "import time\nwhile True:\n    time.sleep(1)\n")
    proc, out = profile(tmp_path, script, "--loader-timeout", "3")
    assert proc.returncode == 1
    assert "no data loader delivered a batch within 3 s" in proc.stderr
    assert "torch.utils.data.DataLoader" in proc.stderr
    assert json.loads((out / "run.json").read_text())["outcome"]["state"] == "timeout"


# ---------------------------------------------------- trials that go wrong

WORKER_FAULT = '''
import os, signal, time
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class Faulty(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        if get_worker_info() is not None:  # only in a loader worker: with num_workers >= 1
            {fault}
        time.sleep(0.002)
        return torch.zeros(4)


if __name__ == "__main__":
    for epoch in range(30):
        for batch in DataLoader(Faulty(), batch_size=4, num_workers=0):
            time.sleep(0.002)
'''


@pytest.mark.parametrize("fault,state,cause,reason", [
    ("time.sleep(3600)", "timeout", "trial_timed_out", "did not finish within"),  # a deadlocked worker
    ("os.kill(os.getpid(), signal.SIGKILL)", "killed", "oom_killed", "out-of-memory killer"),  # the OOM killer
    ("os.kill(os.getpid(), signal.SIGBUS)", "killed", "shm_exhausted", "--shm-size"),  # /dev/shm exhausted
])
def test_a_failing_trial_is_classified_and_the_tune_goes_on(tmp_path, fault, state, cause, reason, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", WORKER_FAULT.replace("{fault}", fault))
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--out", str(out), "--budget", "60", "--trial-timeout", "8",
                         "--max-workers", "4", *TUNE_QUICK, script])
    assert proc.returncode == 0, proc.stderr
    res = json.loads((out / "results.json").read_text())
    bad = [t for t in res["trials"] if t["config"].get("num_workers")]
    assert bad and bad[0]["state"] == state and bad[0]["cause"]["code"] == cause, bad
    assert res["recommendation"]["config"]["num_workers"] == 0  # what worked
    if state == "killed":  # with what was measured: the workers, the machine's RAM or its /dev/shm
        killed = bad[0]["cause"]
        assert killed["workers"] == bad[0]["config"]["num_workers"]
        assert killed.get("ram_bytes") or killed.get("shm_total_bytes")
    assert reason in (out / "report.html").read_text()  # in words, in the trial table


# ------------------------------------------------------------ interrupts


def _wait_for_trials(path, n, proc, timeout=120, poll_s=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            if len(json.loads(path.read_text())["trials"]) >= n:
                return
        except (FileNotFoundError, ValueError, KeyError):
            pass
        time.sleep(poll_s)
    raise AssertionError(f"fewer than {n} trials after {timeout} s")


def _wait_for_launch(trials_dir, prefix, proc, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if any((d / "output.log").exists() for d in trials_dir.glob(prefix + "*")):
            return
        time.sleep(0.05)
    raise AssertionError(f"no trial {prefix}* launched after {timeout} s")


def _default_sigint():
    # As from a terminal: a job started in the background by a non-interactive
    # shell (nohup, `&`) inherits SIGINT ignored, and feedprof rightly keeps it so.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("signum,moment", [
    (signal.SIGINT, "in a trial"), (signal.SIGTERM, "in a trial"),
    (signal.SIGINT, "between trials"),  # the fork server is importing torch (seconds)
])
def test_interrupted_tune_keeps_its_trials_and_resumes(tmp_path, signum, moment, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", torch_loop(load_ms=3, step_ms=2, n=400, batch_size=4, epochs=100))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "feedprof", "tune", "--out", str(out),
                             "--budget", "90", "--max-workers", "8", *TUNE_QUICK, script],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    if moment == "in a trial":
        # Baseline and ceiling are measured; wait until the ladder's first rung
        # is launched (its output log exists): it takes seconds to measure.
        _wait_for_trials(out / "results.json", 2, proc)
        _wait_for_launch(out / "trials", "02-", proc)
        time.sleep(0.3)
    else:
        _wait_for_trials(out / "results.json", 1, proc, poll_s=0.05)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and no_feedprof_traceback(stderr)
    first = json.loads((out / "results.json").read_text())
    assert first["complete"] is False and first["stop_reason"]["code"] == "tune_interrupted"
    assert "feedprof tune --resume DIR goes on from here" in stderr
    if moment == "in a trial":
        assert len(first["trials"]) >= 3 and first["trials"][-1]["state"] == "interrupted"
    assert (out / "report.html").exists()
    assert run_feedprof(["report", str(out / "results.json"), "-o", str(tmp_path / "r.html")]).returncode == 0

    done = run_feedprof(["tune", "--resume", str(out), "--budget", "60", *TUNE_QUICK])  # (its trials' time included)
    assert done.returncode == 0, done.stderr
    final = json.loads((out / "results.json").read_text())
    kept = [t for t in first["trials"] if t["state"] != "interrupted"]
    assert [t["batches_per_s"] for t in final["trials"][:len(kept)]] == [t["batches_per_s"] for t in kept]
    assert len(final["trials"]) > len(kept) and final["recommendation"] is not None


def test_an_interrupt_as_a_tune_finishes_ends_with_130_and_no_lock(tmp_path, no_leftovers, torch):
    """SIGINT once results.json holds its recommendation: the tune is writing its report, printing, or
    shutting down. It ends with 130 (or 0, where it had already exited), never killed by the signal,
    and its lock file is gone."""
    script = write_script(tmp_path, "train.py", torch_loop(load_ms=3, step_ms=2, n=200, batch_size=4, epochs=100))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "feedprof", "tune", "--out", str(out), "--budget", "12",
                             "--max-workers", "2", *TUNE_QUICK, script],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if json.loads((out / "results.json").read_text()).get("recommendation"):
                break
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode in (0, 130), (proc.returncode, stderr)
    assert not (out / ".feedprof.lock").exists()
    assert no_feedprof_traceback(stderr)


# ------------------------------------------------------------ the machine


def test_gpu_lost_mid_run_leaves_a_gap_and_sampling_goes_on(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", torch_loop(load_ms=2, step_ms=2, n=200, epochs=10))
    out = tmp_path / "out"
    env = {"PYTHONPATH": os.pathsep.join([os.path.join(REPO, "tests", "fake_nvml"),
                                          os.environ.get("PYTHONPATH", "")])}
    proc = run_feedprof(["profile", "--out", str(out), "--window-seconds", "4", "--window-batches",
                         "5000", "--interval", "0.1", script], env=env)
    assert proc.returncode == 0, proc.stderr
    run = json.loads((out / "run.json").read_text())
    util = run["samples"]["gpus"][0]["util_pct"]
    assert 42 in util and util[-1] is None  # readings, then the gap after the GPU was lost
    lost_at = util.index(None, util.index(42))
    rss_after = [v for v in run["samples"]["main_rss_bytes"][lost_at:] if v is not None]
    assert len(rss_after) >= 3  # host sampling went on after the GPU was gone
    assert run["host"]["gpus"][0]["name"] == "Fake GPU (tests)"


@pytest.mark.parametrize("out_arg,message", [
    ("/proc/feedprof-cannot-be-here", "cannot create it"),
    ("FILE", "exists and is not a directory"),
])
def test_unusable_output_directory_fails_before_any_trial(tmp_path, out_arg, message, cli):
    script = write_script(tmp_path, "train.py", "print('never runs')\n")
    if out_arg == "FILE":
        out_arg = str(tmp_path / "a-file")
        (tmp_path / "a-file").write_text("")
    for command in ("profile", "tune"):
        proc = cli([command, "--out", out_arg, script])
        assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
        assert "never runs" not in proc.stdout


def test_full_disk_fails_before_any_trial(tmp_path, e2e):  # a real process: its file size limit
    script = write_script(tmp_path, "train.py", "print('never runs')\n")

    def small_files():  # every write past 16 KiB fails, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))

    proc = subprocess.run([sys.executable, "-m", "feedprof", "tune", "--out", str(tmp_path / "out"), script],
                          capture_output=True, text=True, preexec_fn=small_files, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "not writable" in proc.stderr and "never runs" not in proc.stdout


# ------------------------------------------------ what a new user tries first

REQUIRED_ARG = '''
import argparse, torch
from torch.utils.data import DataLoader
parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
args = parser.parse_args()
for batch in DataLoader(list(range(100))):
    pass
'''
EMPTY = '''
import torch
from torch.utils.data import DataLoader, Dataset


class Empty(Dataset):
    def __len__(self):
        return 0

    def __getitem__(self, i):
        raise IndexError(i)


for epoch in range(3):
    for batch in DataLoader(Empty(), batch_size=4):
        pass
'''
MARKUP = '''
import torch
from torch.utils.data import DataLoader
for i, batch in enumerate(DataLoader(list(range(100)))):
    if i == 3:
        raise ValueError("<b>bad</b> <script>alert('x')</script> & </td></tr>")
'''
OWN_POOL = '''
import multiprocessing as mp, time, torch
from torch.utils.data import DataLoader


def square(x):
    return x * x


if __name__ == "__main__":
    pool = mp.Pool(2)  # the script's own pool, never closed: its processes must not outlive the trial
    data = pool.map(square, range(400))
    for epoch in range(50):
        for batch in DataLoader(data, batch_size=2):
            pool.apply_async(square, (1,))
            time.sleep(0.002)
'''
FLOOD = '''
import time, torch
from torch.utils.data import DataLoader
for epoch in range(100):
    for i, batch in enumerate(DataLoader(list(range(400)), batch_size=4)):
        print("x" * 20000, i, flush=True)
        time.sleep(0.004)
'''


@pytest.mark.parametrize("body,exit_code,message", [
    (REQUIRED_ARG, 2, "the following arguments are required: --data"),  # argparse's status
    (EMPTY, 0, "0 batches were delivered, all of them warm-up"),
    (OWN_POOL, 0, "batches measured over"),
])
def test_profile_of_scripts_a_new_user_tries(tmp_path, body, exit_code, message, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", body)
    proc, out = profile(tmp_path, script)
    assert proc.returncode == exit_code, proc.stderr
    assert message in proc.stdout + proc.stderr and no_feedprof_traceback(proc.stderr)
    assert run_feedprof(["report", str(out / "run.json")]).returncode == 0


@pytest.mark.parametrize("body,message", [
    (REQUIRED_ARG, "the script called sys.exit(2)"),
    (EMPTY, "no steady-state batches were measured"),
    (MARKUP, "ValueError: <b>bad</b> <script>alert('x')</script> & </td></tr>"),
])
def test_tune_of_a_script_whose_baseline_fails(tmp_path, body, message, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", body)
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--out", str(out), "--budget", "30", *TUNE_QUICK, script])
    assert proc.returncode == 1 and message in proc.stderr and no_feedprof_traceback(proc.stderr)
    if body is REQUIRED_ARG:  # the script's own words, not only its exit code
        assert "error: the following arguments are required: --data" in proc.stderr
    res = json.loads((out / "results.json").read_text())
    assert res["trials"][0]["role"] == "baseline" and res["recommendation"] is None
    page = (out / "report.html").read_text()
    assert "<b>bad</b>" not in page and "<script>alert" not in page  # markup in an error stays text


def test_a_flood_of_output_is_kept_out_of_the_way(tmp_path, no_leftovers, torch):
    script = write_script(tmp_path, "train.py", FLOOD)
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--out", str(out), "--budget", "20", "--max-workers", "4", *TUNE_QUICK, script])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "xxxxxxxxxx" not in proc.stdout + proc.stderr  # the script's output goes to each trial's output.log
    assert "x" * 20000 in (out / "trials" / "00-baseline" / "output.log").read_text()
    # How many trials fit the budget is the machine's speed; that each one that ran
    # measured its window through the flood (none hung, none failed) is the code's.
    res = json.loads((out / "results.json").read_text())
    ran = [t for t in res["trials"] if t["state"] != "rejected"]
    assert ran and ran[0]["role"] == "baseline" and all(t["state"] == "ok" for t in ran), res["trials"]
    assert res["recommendation"] is not None


@pytest.mark.writes_invalid_json
@pytest.mark.parametrize("damage,message", [
    (lambda text: text[: len(text) // 2], "not JSON"),  # a file cut short (a full disk, a copy interrupted)
    (lambda text: text.replace('"feedprof.tune/1"', '"feedprof.tune/4"'),  # another version (a development build's)
     "schema 'feedprof.tune/4' is not one this feedprof reads (feedprof.tune/1)"),
])
def test_a_damaged_or_future_results_file(tmp_path, damage, message, cli):
    from feedprof.store.codec import dumps
    from feedprof.store import TuneResult

    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text(damage(dumps(TuneResult(script=str(tmp_path / "train.py")))))
    for args in (["report", str(out / "results.json")], ["tune", "--resume", str(out)]):
        proc = cli(args)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
