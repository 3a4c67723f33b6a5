import os
import subprocess
import sys
import time

import psutil
import pytest

from feedprof.record.host import ProcessTreeProbe, host_info, local_world_size, usable_cpu_count


def cgroup(tmp_path, text):
    (tmp_path / "cpu.max").write_text(text)
    return str(tmp_path)


def test_cpu_count_honours_affinity():
    assert usable_cpu_count(cgroup_root="/nonexistent") == len(os.sched_getaffinity(0))


def test_cpu_count_honours_a_cgroup_quota(tmp_path):
    assert usable_cpu_count(cgroup_root=cgroup(tmp_path, "100000 100000\n")) == 1


def test_fractional_quota_rounds_down_but_never_to_zero(tmp_path):
    assert usable_cpu_count(cgroup_root=cgroup(tmp_path, "50000 100000\n")) == 1


def test_unlimited_quota(tmp_path):
    assert usable_cpu_count(cgroup_root=cgroup(tmp_path, "max 100000\n")) == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("env,expected", [({}, 1), ({"LOCAL_WORLD_SIZE": "4"}, 4), ({"LOCAL_WORLD_SIZE": "x"}, 1)])
def test_local_world_size(monkeypatch, env, expected):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("SLURM_NTASKS_PER_NODE", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert local_world_size() == expected


def test_host_info_reads_the_machine_without_importing_frameworks():
    import sys

    had_torch = "torch" in sys.modules
    info = host_info()
    assert info.cpus_usable >= 1 and info.ram_bytes > 0 and info.cpu_model
    assert "torch" in info.frameworks  # from package metadata
    assert ("torch" in sys.modules) == had_torch


@pytest.mark.serial
def test_a_worker_read_as_soon_as_it_is_found_is_not_a_spike(e2e):  # a spinning process, read for seconds
    # A busy child listed and read in the same sample: psutil's cpu_percent()
    # divided a 10 ms CPU-time tick by microseconds there (a few hundred tries
    # here read up to 4.7 cores from one process).
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # it has used CPU time before any probe sees it
        first = []
        for _ in range(300):
            probe = ProcessTreeProbe(os.getpid(), min_children_refresh_s=0.0)
            first.append(probe.read(0.0).workers_cpu_pct)
        time.sleep(0.3)
        later = probe.read(0.3).workers_cpu_pct
    finally:
        busy.kill()
        busy.wait()
    assert max(first) <= 105.0  # one busy process: at most one core
    assert later > 30.0  # and it is seen working


FORKSERVER_POOL = """
import multiprocessing, sys, time
if __name__ == "__main__":
    ctx = multiprocessing.get_context(sys.argv[1])
    workers = [ctx.Process(target=time.sleep, args=(30,)) for _ in range(2)]
    for w in workers:
        w.start()
    print("started", flush=True)
    time.sleep(30)
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_workers_of_other_start_methods_are_workers_and_their_helpers_are_not(tmp_path, method):
    """The fork server and the resource tracker are helpers; what the server
    forks carries its command line, yet it is a worker."""
    script = tmp_path / "pool.py"
    script.write_text(FORKSERVER_POOL)
    main = subprocess.Popen([sys.executable, str(script), method], stdout=subprocess.PIPE, text=True)
    try:
        assert main.stdout.readline().strip() == "started"
        probe = ProcessTreeProbe(main.pid, min_children_refresh_s=0.0, memory_detail_interval_s=0.0)
        reading = probe.read(0.0)
        assert reading.n_workers == 2
    finally:
        tree = psutil.Process(main.pid).children(recursive=True)
        main.kill()
        main.wait()
        main.stdout.close()
        for p in tree:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
