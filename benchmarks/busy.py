"""A shared machine, made on purpose: processes that keep cores busy beside a benchmark.

The load runs in the benchmark's own session, as a user's other work in the same shell or
batch script would: with Linux's autogroup scheduling, a session is one scheduling group,
so where the load lives decides how the cores are shared (feedprof/trial/group.py).

    with BusyLoad(1.0) as load:   # one core spinning
        ...
    load.measured()               # the cores it really took
"""
from __future__ import annotations

import sys
import time


class BusyLoad:
    """``cores`` processes that spin (a whole core each; a fraction spins part of each 10 ms), and
    how much CPU they really got: on a 2-core machine the tunes and the harness share what is left."""

    def __init__(self, cores: float):
        self.cores = cores
        self.procs: list = []
        self.t0 = 0.0

    def __enter__(self) -> "BusyLoad":
        import subprocess

        whole, part = int(self.cores), self.cores - int(self.cores)
        shares = [1.0] * whole + ([part] if part > 0.01 else [])
        spin = ("import time\nshare={s}\nwhile True:\n    t=time.perf_counter()\n"
                "    while time.perf_counter()-t<0.01*share: pass\n    time.sleep(0.01*(1-share))")
        self.procs = [subprocess.Popen([sys.executable, "-c", spin.format(s=share)]) for share in shares]
        self.t0 = time.monotonic()
        return self

    def measured(self) -> float:
        """The load's mean CPU so far, in cores."""
        if not self.procs:
            return getattr(self, "final", 0.0)
        import psutil

        used = 0.0
        for p in self.procs:
            try:
                t = psutil.Process(p.pid).cpu_times()
                used += t.user + t.system
            except psutil.Error:
                continue
        return used / max(1e-9, time.monotonic() - self.t0)

    def __exit__(self, *exc) -> None:
        self.final = self.measured()  # (read while the load still runs)
        for p in self.procs:
            p.kill()
            p.wait()
        self.procs = []
