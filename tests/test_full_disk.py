"""The output directory's filesystem becomes full mid-run (a real one: a small
tmpfs in a mount namespace of the test's own, filled by the script itself):
the exit code for the machine's refusal (2), one line naming the file and the
cause, what was measured shown and what the file on disk keeps said, no
feedprof traceback, no temporary file left, nothing left running."""
import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import write_script

# Every run of it counts itself in COUNT; run number FILL_AT fills the output's filesystem.
FILLING = '''
import os, time
import torch
from torch.utils.data import DataLoader, Dataset

with open({count!r}, "a") as fh:
    fh.write("x")
if os.path.getsize({count!r}) == {fill_at}:
    try:
        with open(os.path.join({out!r}, "filler"), "wb") as fh:
            while True:
                fh.write(bytes(65536))
                fh.flush()
    except OSError as exc:
        print("filled:", exc, flush=True)


class Samples(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        time.sleep(0.02)
        return torch.zeros(4)


for epoch in range(100):
    for x in DataLoader(Samples(), batch_size=2, num_workers=2):
        time.sleep(0.002)
'''
QUICK = ["--window-seconds", "1", "--min-window-batches", "10", "--warmup-batches", "2", "--interval", "0.1"]


def _in_small_filesystem(out, args, keep):
    """feedprof, with ``out`` a 4 MiB tmpfs of its own (unshare: no root needed where user
    namespaces are on); what it held at the end is copied to ``keep`` (the tmpfs goes with the namespace)."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=4M tmpfs {out}"],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a namespace of our own: {probe.stderr.decode().strip()}")
    script = f'mount -t tmpfs -o size=4M tmpfs {out} || exit 99; "$@"; rc=$?; cp -r {out} {keep}; exit $rc'
    command = ["unshare", "-rm", "sh", "-c", script, "sh", sys.executable, "-m", "feedprof", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("command,fill_at", [("tune", 3), ("profile", 1)])
def test_output_filesystem_full_mid_run(tmp_path, command, fill_at, no_leftovers, torch):
    out = tmp_path / "out"
    out.mkdir()
    script = write_script(tmp_path, "train.py", FILLING.format(count=str(tmp_path / "count"), fill_at=fill_at,
                                                               out=str(out)))
    extra = ["--budget", "90", "--quiet", *QUICK] if command == "tune" else ["--window-batches", "40"]
    keep = tmp_path / "kept"
    proc = _in_small_filesystem(out, [command, "--out", str(out), *extra, script], keep)
    assert proc.returncode == 2, proc.stderr
    name = "results.json" if command == "tune" else "run.json"
    line = [s for s in proc.stderr.splitlines() if s.startswith("feedprof: cannot write")]
    assert line and f"{out}/{name}: No space left on device (its filesystem is full" in line[0], proc.stderr
    assert "Traceback" not in proc.stderr
    if command == "tune":  # the trials measured before the disk filled: in memory, shown, and counted
        assert "Recommended" in proc.stderr or "num_workers" in proc.stderr, proc.stderr
        assert "it keeps 2 of the 3 trial(s) measured" in line[0]
        assert len(json.loads((keep / "results.json").read_text())["trials"]) == 2
    else:
        assert "verdict" in proc.stdout or "no loader" in proc.stdout
    left = sorted(p.name for p in keep.iterdir() if p.name not in ("trial", "trials"))
    assert left == sorted(["filler", *([name] if command == "tune" else [])])  # no temporary file, no lock file
