"""Every timing decision reads the injected Clock (record/clock.py): on a fake
one, the waits below pass no real time and the figures follow the fake time."""
import datetime
import os
import subprocess
import sys
import time

import psutil
import pytest

from feedprof.record.clock import now_iso
from feedprof.record.host import ProcessCpu
from feedprof.record.leftovers import find_leftovers
from feedprof.record.others import OtherLoad
from feedprof.trial.zygote import ForkedTrial
from tests.fakes import FakeClock


def test_now_iso_is_the_clocks_wall_time():
    clock = FakeClock(0.0)
    first = now_iso(clock)
    assert first == datetime.datetime.fromtimestamp(clock.wall_s()).astimezone().isoformat(timespec="seconds")
    clock.advance(3600.0)
    later = datetime.datetime.fromisoformat(now_iso(clock)) - datetime.datetime.fromisoformat(first)
    assert later == datetime.timedelta(hours=1)


def test_other_load_spreads_cpu_over_the_clocks_time():
    clock = FakeClock()
    load = OtherLoad(clock)
    clock.advance(1e9)  # no process used 5 % of a core over so long
    assert load.stop(job_pids=()) == ()


def test_process_cpu_rates_over_the_clocks_time():
    clock = FakeClock()
    cpu = ProcessCpu(psutil.Process(), clock)
    end = time.process_time() + 0.05
    while time.process_time() < end:  # CPU time, not a sleep
        pass
    clock.advance(ProcessCpu.MIN_INTERVAL_S / 2)
    assert cpu.read() == 0.0  # too soon on the clock: the baseline is kept
    clock.advance(1.0)
    assert cpu.read() > 0.0


class SilentZygote:
    """A fork server that never reports its trial's exit."""

    def __init__(self, clock):
        self.clock = clock

    def exit_code(self, pid):
        return None


def test_a_forked_trials_wait_times_out_on_its_servers_clock():
    clock = FakeClock()
    with pytest.raises(subprocess.TimeoutExpired):
        ForkedTrial(SilentZygote(clock), os.getpid()).wait(timeout=30.0)
    assert 130.0 <= clock.now_s() < 130.1


def test_leftovers_settle_on_the_clock(tmp_path):
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    clock = FakeClock()
    try:
        found = find_leftovers(str(tmp_path), stray.pid, [psutil.Process(stray.pid)], settle_s=0.5, clock=clock)
    finally:
        stray.kill()
        stray.wait()
    assert [p.pid for p in found.processes] == [stray.pid]
    assert 100.5 <= clock.now_s() < 100.6  # it gave the process settle_s to go, on the fake clock
