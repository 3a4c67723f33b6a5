"""How a trial ends: the watcher's limits on a fake clock, and classify_end."""
import signal

import pytest

from feedprof.reasons import (ExitedWithCode, Interrupted, KilledBySignal, NoBatchWithin, OutOfMemoryKilled,
                              ScriptFailed, SharedMemoryExhausted, TrialTimedOut)
from feedprof.store import Outcome, TrialState
from feedprof.tune.runner import EXIT_GRACE_S, TrialOptions, _Watch, classify_end
from tests.fakes import FakeClock


class RunsForever:
    pid = 2**22 + 1  # no such process: its descendants are none
    returncode = None

    def poll(self):
        return None


def watch(tmp_path, clock, **opts):
    return _Watch(RunsForever(), clock.now_s(), TrialOptions(**opts), str(tmp_path / "events.jsonl"), None, clock)


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
