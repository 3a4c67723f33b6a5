"""Other processes' CPU during a trial: named, and said when the machine is busy."""
import subprocess
import sys
import time

import pytest

from feedprof.analyse.noise import busy_machine
from feedprof.record.others import OtherLoad
from feedprof.store import OtherProcess, Role, Run, TrialState
from tests.records import make_trial


@pytest.mark.serial
def test_a_busy_process_outside_the_job_is_named(e2e):  # spinning processes
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        load = OtherLoad()
        time.sleep(1.0)
        others = load.stop(job_pids=())
    finally:
        spinner.kill()
        spinner.wait()
    # started by this process, so it is a descendant of the job's parent: left out
    assert spinner.pid not in [p.pid for p in others]
    load = OtherLoad()
    time.sleep(0.2)
    assert all(p.cpu_cores >= 0.05 for p in load.stop(job_pids=()))


@pytest.mark.serial
def test_an_unrelated_busy_process_is_named(e2e):
    # double fork: the spinner's parent exits, so it is not one of ours
    launcher = subprocess.run([sys.executable, "-c", (
        "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'while True: pass'], "
        "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid)")],
        capture_output=True, text=True, check=True)
    pid = int(launcher.stdout)
    try:
        time.sleep(0.2)
        load = OtherLoad()
        time.sleep(1.0)
        others = load.stop(job_pids=())
    finally:
        subprocess.run(["kill", "-9", str(pid)])
    mine = [p for p in others if p.pid == pid]
    assert mine and mine[0].cpu_cores > 0.3 and mine[0].name.startswith("python")


def trial(other_cores, procs=()):
    return make_trial(index=0, role=Role.SEARCH, config={}, state=TrialState.OK, batches_per_s=1.0,
                 other_cpu_cores=other_cores, run=Run(other_processes=tuple(procs)))


def test_busy_machine_is_said_only_when_others_take_a_real_share():
    assert busy_machine([trial(0.05), trial(0.1)], cpus=2) is None
    busy = busy_machine([trial(1.2, [OtherProcess(1, "make", 1.0), OtherProcess(2, "cc1", 0.3)]),
                         trial(0.8, [OtherProcess(2, "cc1", 0.9)])], cpus=2)
    assert busy.other_cores == 1.0 and busy.cpus == 2 and busy.busiest == ("cc1", "make")
