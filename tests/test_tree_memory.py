"""record/tree_memory.py on real processes: a job's memory counted once, however many forked
workers share it (what an online memory budget is held to)."""
import subprocess
import sys
import time

import psutil

from feedprof.record.tree_memory import tree_bytes

MIB = 1 << 20

FORKS_SHARING = """
import os, sys, time
held = bytearray(os.urandom(1 << 20)) * 200  # 200 MiB, every page touched
for _ in range(4):
    if os.fork() == 0:  # a worker: shares the parent's pages until it writes them
        time.sleep(60)
        os._exit(0)
print("ready", flush=True)
time.sleep(60)
"""


def test_forked_children_sharing_a_parents_pages_count_them_once():
    proc = subprocess.Popen([sys.executable, "-c", FORKS_SHARING], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        tree = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        assert len(tree) == 5
        rss = sum(psutil.Process(pid).memory_info().rss for pid in tree)
        held = tree_bytes([proc.pid])
        assert rss > 900 * MIB  # RSS counts the 200 MiB in each of the five
        assert 190 * MIB < held < 320 * MIB, held / MIB  # counted once (plus the interpreters)
        assert abs(tree_bytes([proc.pid, tree[1]]) - held) < 16 * MIB  # a child named twice: counted once
    finally:
        try:
            for child in psutil.Process(proc.pid).children():
                child.kill()
        except psutil.Error:
            pass
        proc.kill()
        proc.wait()


def test_processes_that_ended_count_nothing():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    time.sleep(0.1)
    assert tree_bytes([proc.pid]) == 0


MAPS_A_FILE = """
import mmap, sys, time
with open(sys.argv[1], "rb") as fh:
    mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
total = sum(mapped[i] for i in range(0, len(mapped), 4096))  # every page resident
held = bytearray(64 << 20)  # 64 MiB of its own, zeroed: touched below
for i in range(0, len(held), 4096):
    held[i] = 1
print("ready", flush=True)
time.sleep(60)
"""


def test_a_memory_mapped_files_pages_are_not_the_jobs_memory(tmp_path):
    """A dataset read through mmap (numpy memmap, Arrow) is page cache the kernel reclaims: 300 MiB
    of it resident count nothing; the process's own 64 MiB count. (Linux 5.7+: the kernel splits PSS.)"""
    import pytest

    with open("/proc/self/smaps_rollup", encoding="ascii") as fh:
        if "Pss_Anon" not in fh.read():
            pytest.skip("this kernel does not split PSS (Pss_Anon: Linux 5.7+): the whole PSS counts")
    data = tmp_path / "dataset.bin"
    with open(data, "wb") as fh:
        for _ in range(300):
            fh.write(b"\x01" * MIB)
    proc = subprocess.Popen([sys.executable, "-c", MAPS_A_FILE, str(data)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert psutil.Process(proc.pid).memory_full_info().pss > 300 * MIB  # PSS counts the mapped file
        held = tree_bytes([proc.pid])
        assert 60 * MIB < held < 150 * MIB, held / MIB
    finally:
        proc.kill()
        proc.wait()
