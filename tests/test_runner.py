"""How a trial ends: the watcher's limits on a fake clock, and classify_end."""
import signal

import pytest

from feedprof.store.reasons import (CudaInForkedWorker, ExitedWithCode, Interrupted, KilledBySignal, NoBatchWithin,
                              OutOfMemoryKilled, ScriptFailed, SharedMemoryExhausted, TooManyOpenFiles, TrialTimedOut)
from feedprof.record.host import memory_limit_bytes
from feedprof.store import HostInfo, Outcome, Peaks, Samples, TrialState
from feedprof.trial.ending import classify_end, with_figures
from feedprof.trial.options import TrialOptions
from feedprof.trial.watch import EXIT_GRACE_S, Watch
from tests.fakes import FakeClock


class RunsForever:
    pid = 2**22 + 1  # no such process: its descendants are none
    returncode = None

    def poll(self):
        return None


def watch(tmp_path, clock, **opts):
    return Watch(RunsForever(), clock.now_s(), TrialOptions(**opts), str(tmp_path / "events.jsonl"), None, clock)


def test_no_batch_within_the_loader_timeout(tmp_path):
    clock = FakeClock()
    w = watch(tmp_path, clock, loader_timeout_s=3.0, timeout_s=100.0)
    w.wait()
    assert w.timed_out == NoBatchWithin(limit_s=3.0)
    assert 3.0 < clock.now_s() - 100.0 < 3.2  # it waited on the trial's clock, not longer


def test_the_whole_trial_times_out_once_batches_flow(tmp_path):
    clock = FakeClock()
    (tmp_path / "events.jsonl").write_text('{"event": "first_batch"}\n')
    w = watch(tmp_path, clock, loader_timeout_s=3.0, timeout_s=20.0)
    w.wait()
    assert w.timed_out == TrialTimedOut(limit_s=20.0)


def test_a_measured_script_that_lingers_is_ended_after_the_grace(tmp_path):
    clock = FakeClock()
    (tmp_path / "events.jsonl").write_text('{"event": "first_batch"}\n{"event": "window_done"}\n')
    w = watch(tmp_path, clock, loader_timeout_s=3.0, timeout_s=100.0)
    w.wait()
    assert w.timed_out is None  # measured: not a timeout
    assert EXIT_GRACE_S < clock.now_s() - 100.0 < EXIT_GRACE_S + 0.2


def test_classify_end():
    tb = "Traceback...\nRuntimeError: x"
    failed = Outcome(state=TrialState.FAILED, cause=ScriptFailed(error="RuntimeError: x"), traceback=tb)
    assert classify_end(failed, 1, None, interrupted=True).cause == Interrupted()
    assert classify_end(failed, 1, TrialTimedOut(limit_s=9), False).state == TrialState.TIMEOUT
    assert classify_end(failed, 1, None, False) == Outcome(state=TrialState.FAILED, cause=failed.cause,
                                                           exit_code=1, traceback=tb)
    bus = classify_end(None, 1, None, False, log_tail="ERROR: Unexpected bus error encountered in worker. "
                                                      "This might be caused by insufficient shared memory (shm). Bus error")
    assert bus.state == TrialState.KILLED and isinstance(bus.cause, SharedMemoryExhausted)
    oom = classify_end(None, 1, None, False, log_tail="DataLoader worker (pid 9) is killed by signal: Killed.")
    assert isinstance(oom.cause, OutOfMemoryKilled)


@pytest.mark.parametrize("sig,cause", [
    (signal.SIGKILL, OutOfMemoryKilled(signal="SIGKILL")),
    (signal.SIGBUS, SharedMemoryExhausted(signal="SIGBUS")),
    (signal.SIGSEGV, KilledBySignal(signal="SIGSEGV")),
])
def test_a_child_killed_by_a_signal(sig, cause):
    out = classify_end(None, -sig, None, False)
    assert out.state == TrialState.KILLED and out.cause == cause


def test_a_child_that_wrote_nothing_and_exited():
    out = classify_end(None, 3, None, False, log_tail="starting\nsegfault in C code\n")
    assert out.state == TrialState.FAILED
    assert out.cause == ExitedWithCode(exit_code=3, last_line="segfault in C code")


def test_a_script_that_died_of_a_worker_hazard_says_which():
    emfile = classify_end(None, 1, None, False, log_tail="RuntimeError: Too many open files. Communication with "
                                                         "the workers is no longer possible.")
    assert emfile.state == TrialState.FAILED and emfile.cause == TooManyOpenFiles(error="RuntimeError: Too many "
                                                                                        "open files.")
    cuda = CudaInForkedWorker(error="RuntimeError: Cannot re-initialize CUDA in forked subprocess.")
    child = Outcome(state=TrialState.FAILED, cause=cuda, traceback="Traceback...")
    assert classify_end(child, 1, None, False, log_tail="noise").cause == cuda  # the child named it already


def test_a_kill_carries_what_the_trial_measured():
    samples = Samples(worker_pss_bytes=(None, 300 * 2**20), fd_limit=64,
                      peaks=Peaks(n_workers=4, worker_pss_bytes=200 * 2**20, tree_pss_bytes=2**30,
                                  shm_used_bytes=60 * 2**20, main_fds=50, worker_fds=30))
    host = HostInfo(ram_bytes=8 * 2**30, shm_total_bytes=64 * 2**20)
    oom = with_figures(Outcome(state=TrialState.KILLED, cause=OutOfMemoryKilled(signal="SIGKILL")), samples, host)
    assert oom.cause.workers == 4 and oom.cause.worker_pss_bytes == 300 * 2**20  # the probe's reading was higher
    assert oom.cause.tree_pss_bytes == 2**30 and oom.cause.ram_bytes in (8 * 2**30, memory_limit_bytes())
    shm = with_figures(Outcome(state=TrialState.KILLED, cause=SharedMemoryExhausted(signal="SIGBUS")), samples, host)
    assert shm.cause.shm_total_bytes == 64 * 2**20 and shm.cause.shm_peak_bytes == 60 * 2**20
    files = with_figures(Outcome(state=TrialState.FAILED, cause=TooManyOpenFiles(error="x")), samples, host)
    assert (files.cause.limit_fds, files.cause.main_fds, files.cause.worker_fds) == (64, 50, 30)
    failed = Outcome(state=TrialState.FAILED, cause=ScriptFailed(error="ValueError: x"))
    assert with_figures(failed, samples, host) == failed


def test_a_descriptor_the_main_process_could_not_receive_is_too_many_open_files():
    """Past RLIMIT_NOFILE, multiprocessing's receive of a shared tensor's
    descriptor can end empty: a bare EOFError raised in recvfds."""
    from feedprof.trial.failures import failure_cause

    def recvfds():
        raise EOFError

    try:
        recvfds()
    except EOFError as exc:
        assert failure_cause(exc) == TooManyOpenFiles(error="EOFError: in recvfds")
    tail = ('  File "/usr/lib/python3.11/multiprocessing/reduction.py", line 159, in recvfds\n'
            '    raise EOFError\nEOFError\n')
    assert classify_end(None, 1, None, False, log_tail=tail).cause == TooManyOpenFiles(error="EOFError: in recvfds")
    try:
        raise EOFError  # anywhere else: the script's own
    except EOFError as exc:
        assert not isinstance(failure_cause(exc), TooManyOpenFiles)


def test_a_workers_error_is_its_own_last_line():
    from feedprof.trial.failures import worker_error

    error = ("FileNotFoundError: Caught FileNotFoundError in DataLoader worker process 0.\n"
             "Original Traceback (most recent call last):\n  File \"train.py\", line 9, in __getitem__\n"
             "    open(path)\nFileNotFoundError: [Errno 2] No such file or directory: '/data/\\udcff.jpg'\n")
    assert worker_error(error) == ("FileNotFoundError: [Errno 2] No such file or directory: '/data/\\udcff.jpg' "
                                   "(caught FileNotFoundError in DataLoader worker process 0)")
    assert worker_error("ValueError: bad") == "ValueError: bad"
