"""The training loop the attach tests read from outside (tests/test_attach.py), started by hand as a
user starts a job: the benchmark's own (benchmarks/workloads/attach_loop.py), which writes its
stopwatch (the loop's wait inside next() and its wall time, since it began) to the file named by
--clock every 0.2 s, so a window of the attach can be checked against it."""
import os

with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "workloads",
                       "attach_loop.py"), encoding="utf-8") as _fh:
    LOOP = _fh.read()
