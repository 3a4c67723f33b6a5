"""One feedprof at a time per output directory (feedprof/outdir.py), and a run's end: the lock file
gone however the run ends, and an interrupt at any moment an exit with 130 (cli.entry)."""
import os
import signal
import subprocess
import sys

import pytest

from feedprof.outdir import LOCK_NAME, OutDirInUse, claimed
from tests.conftest import REPO


def test_the_lock_holds_the_pid_while_the_run_holds_it_and_goes_with_it(tmp_path):
    lock = tmp_path / LOCK_NAME
    with claimed(str(tmp_path)):
        assert lock.read_text() == str(os.getpid())
        with pytest.raises(OutDirInUse) as refused:
            with claimed(str(tmp_path)):  # (a second holder: another open file description of the same file)
                pass
        assert refused.value.pid == os.getpid()
    assert not lock.exists()


def test_an_interrupted_run_leaves_no_lock_file(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with claimed(str(tmp_path)):
            raise KeyboardInterrupt
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_file_left_by_a_killed_run_is_taken_over(tmp_path):
    (tmp_path / LOCK_NAME).write_text("999999")  # (its holder died: the kernel dropped its lock)
    with claimed(str(tmp_path)):
        assert (tmp_path / LOCK_NAME).read_text() == str(os.getpid())
    assert not (tmp_path / LOCK_NAME).exists()


ENDS = {
    # main() interrupted as it unwinds
    "in main": "def main():\n    raise KeyboardInterrupt\n",
    # a SIGINT after main() returned, as Python shuts down (Python alone would die of the signal)
    "after main": "import atexit\natexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))\n"
                  "def main():\n    return 0\n",
}


@pytest.mark.parametrize("moment", sorted(ENDS))
def test_an_interrupt_at_any_moment_ends_with_130(moment, e2e):
    code = ("import os, signal\nimport feedprof.cli as cli\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
            + ENDS[moment] + "cli.main = main\ncli.entry()\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 130, (proc.returncode, proc.stderr)
