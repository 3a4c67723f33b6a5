"""The loading profiler in this process (record/loadprof.py): a loader whose stages are known by
construction (a wait, and CPU work), sampled as a trial samples it. Verdicts that are unambiguous
on a busy machine too: the wait is the larger share and waits, the CPU stage computes."""
import json
import os
import threading
import time

import pytest

from feedprof.record import loadprof
from feedprof.record.loadprof import LoadingProfiler, loading, merge_profiles, read_profiles

HERE = os.path.dirname(os.path.abspath(__file__))


def spin(seconds):
    t = time.thread_time()
    x = 0
    while time.thread_time() - t < seconds:
        for i in range(100):
            x += i * i
    return x


def read_record():
    time.sleep(0.006)


def decode_record():
    spin(0.002)


def dumps_library():
    return json.dumps(list(range(20000)))  # a library function (the standard library) called from this line


@pytest.fixture
def profiler(tmp_path, monkeypatch):
    p = LoadingProfiler()
    p.configure(str(tmp_path), HERE, os.getpid())
    p.interval_s = 0.02  # 50 Hz: enough samples in the seconds a test loads (the default is 10 Hz)
    monkeypatch.setattr(loadprof, "PROFILER", p)
    return p


def run_loader(seconds, *stages):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        with loading("Staged"):
            for stage in stages:
                stage()


def test_a_wait_and_cpu_work_are_told_apart_with_their_shares(profiler):
    run_loader(2.0, read_record, decode_record)
    (p,) = merge_profiles([profiler.snapshot()])
    assert p.dataset == "Staged" and p.calls > 50 and p.in_main and p.sampled_s > 0
    by_fn = {f.function.split(":")[-1]: f for f in p.functions}
    read, decode = by_fn["read_record"], by_fn["decode_record"]
    assert read.wall_s > decode.wall_s  # 6 ms a call against 2 ms
    assert 0.5 < read.wall_s / p.sampled_s < 0.95
    assert read.cpu_s + read.runq_s < 0.35 * read.wall_s  # it sleeps: waiting
    assert decode.cpu_s + decode.runq_s > 0.5 * decode.wall_s  # it spins: computing (or waiting for a CPU)
    assert p.cpu_s < 0.6 * p.wall_s  # the exact totals agree: mostly waiting


def test_library_frames_are_folded_into_the_user_line_that_called_them(profiler):
    run_loader(1.0, dumps_library)
    (p,) = merge_profiles([profiler.snapshot()])
    top = p.lines[0]
    assert top.function == "dumps_library" and top.site.startswith("test_loadprof.py:")
    assert all("json" not in line.site for line in p.lines)  # json's own frames are never a line


def test_nothing_is_sampled_while_nothing_loads(profiler):
    run_loader(0.2, read_record)
    time.sleep(0.1)  # (a tick already under way when the last call ended still counts)
    before = profiler.snapshot()["datasets"]["Staged"]["sampled_s"]
    time.sleep(0.3)  # the sampler is asleep: no tick while no loading call runs
    assert profiler.snapshot()["datasets"]["Staged"]["sampled_s"] == before
    assert not profiler._active


def test_a_thread_beside_the_main_one_is_timed_and_never_sampled(profiler):
    """Its frames are never read from another thread (Python 3.11 crashed doing it): its calls are
    added up exactly, and no line is sampled."""
    threads = [threading.Thread(target=run_loader, args=(1.0, read_record)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (p,) = merge_profiles([profiler.snapshot()])
    assert p.calls > 100 and p.wall_s > 2.5  # three threads loading for 1 s each
    assert p.sampled_s == 0 and not p.lines


def test_the_main_thread_is_sampled_beside_loading_threads(profiler):
    t = threading.Thread(target=run_loader, args=(1.0, read_record))
    t.start()
    run_loader(1.0, decode_record)
    t.join()
    (p,) = merge_profiles([profiler.snapshot()])
    assert 0.5 < p.sampled_s < 1.5  # the main thread's second, not the other thread's
    assert {f.function.split(":")[-1] for f in p.functions} == {"decode_record", "spin"}  # never read_record


def test_a_signal_handler_of_the_script_s_own_is_left_alone(tmp_path):
    """Where SIGPROF is handled already (another profiler), lines are not sampled and that handler
    keeps every signal it gets; the calls are still timed."""
    script = tmp_path / "own_handler.py"
    script.write_text(f"""
import os, signal, sys, time
sys.path.insert(0, {repr(os.path.dirname(HERE))})
from feedprof.record import loadprof
got = []
signal.signal(signal.SIGPROF, lambda *a: got.append(1))
loadprof.PROFILER.configure({repr(str(tmp_path))}, {repr(str(tmp_path))}, os.getpid())
t0 = time.perf_counter()
while time.perf_counter() - t0 < 0.5:
    with loadprof.loading("Staged"):
        time.sleep(0.005)
snap = loadprof.PROFILER.snapshot()["datasets"]["Staged"]
print(len(got), snap["calls"], snap["sampled_s"])
""")
    import subprocess
    import sys
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got, calls, sampled_s = out.stdout.split()
    assert got == "0" and int(calls) > 20 and float(sampled_s) == 0


def test_every_process_flushes_its_counts_and_the_parent_merges_them(profiler, tmp_path):
    run_loader(0.3, read_record)
    profiler.flush()
    other = dict(profiler.snapshot(), pid=123456, main=False)
    (tmp_path / "loading-123456.json").write_text(json.dumps(other))
    (tmp_path / "loading-99.json.tmp").write_text("{half-written")  # killed mid-write: not read
    (p,) = merge_profiles(read_profiles(str(tmp_path)))
    mine = profiler.snapshot()["datasets"]["Staged"]
    assert p.processes == 2 and p.calls == 2 * mine["calls"] and p.in_main


def test_a_process_that_never_stops_loading_still_flushes(profiler, tmp_path):
    """A worker whose loading calls follow each other with no gap (here: one call that lasts) is
    flushed every FLUSH_S all the same; it is killed with its trial, and keeps what it flushed."""
    flushed = tmp_path / f"loading-{os.getpid()}.json"
    with loading("Staged"):
        t0 = time.perf_counter()
        while not flushed.exists() and time.perf_counter() - t0 < 20 * loadprof.FLUSH_S:
            read_record()
    assert flushed.exists()
    assert json.loads(flushed.read_text())["datasets"]["Staged"]["sampled_s"] > 0


def test_switch_interval_is_restored_once_the_last_loading_call_ends(profiler):
    """Thread workers load at once: the first saves the process's switch interval, the last puts it
    back (each restoring what it saw on entering would leave a lowered one behind)."""
    import sys

    before = sys.getswitchinterval()
    entered, release = threading.Event(), threading.Event()

    def other_worker():
        with loading("Staged"):
            entered.set()
            release.wait(5)

    t = threading.Thread(target=other_worker)
    t.start()
    entered.wait(5)
    with loading("Staged"):  # enters second, leaves first
        assert sys.getswitchinterval() == pytest.approx(loadprof.SWITCH_S)
    assert sys.getswitchinterval() == pytest.approx(loadprof.SWITCH_S)  # the other is still loading
    release.set()
    t.join()
    assert sys.getswitchinterval() == before


def test_off_without_a_directory(monkeypatch):
    p = LoadingProfiler()
    monkeypatch.setattr(loadprof, "PROFILER", p)
    with loading("Staged"):
        pass
    assert p._thread is None and not p._stats
