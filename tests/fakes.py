"""Fakes for what this machine cannot have: a clock we drive, and an NVML
with GPUs. Each stands behind the same small interface as the real thing."""
from __future__ import annotations

import threading
import types
from typing import Dict, List, Optional, Tuple


class FakeClock:
    """``now_s`` returns what the test says; ``wait_s`` and ``sleep_s`` advance
    time instead of sleeping."""

    def __init__(self, t: float = 100.0):
        self.t = t
        self.cpu = 0.0  # the calling thread's CPU time: moves only when a test says
        self.waits: List[float] = []

    def now_s(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt

    def wait_s(self, event: threading.Event, timeout_s: float) -> bool:
        self.waits.append(timeout_s)
        self.t += max(0.0, timeout_s)
        return event.is_set()

    def sleep_s(self, seconds: float) -> None:
        self.t += max(0.0, seconds)

    def wall_s(self) -> float:
        return 1_790_000_000.0 + self.t  # a day in November 2026, moving with the fake time

    def thread_cpu_s(self) -> float:
        return self.cpu


def _nvml_errors():
    """NVML's error classes, from tests/fake_nvml/pynvml.py (one definition)."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_nvml", "pynvml.py")
    spec = importlib.util.spec_from_file_location("feedprof_tests_fake_pynvml", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_pynvml(uuids: List[str], names: Optional[List[str]] = None, init_error: Optional[int] = None,
                util: Optional[Dict[int, float]] = None,
                compute: Optional[Dict[int, List[Tuple[int, Optional[int]]]]] = None,
                graphics: Optional[Dict[int, List[Tuple[int, Optional[int]]]]] = None):
    """A module with pynvml's API for len(uuids) GPUs in NVML (PCI) order.

    ``lost`` (a set of NVML indices) makes every query of those devices raise
    NVMLError_GpuIsLost, as a GPU that fell off the bus does. ``compute`` and
    ``graphics`` map an NVML index to the (pid, usedGpuMemory) pairs its
    per-process queries list (``nv.compute`` / ``nv.graphics`` can be changed
    later); usedGpuMemory None is NVML's "not available".
    """
    nv = types.SimpleNamespace()
    errors = _nvml_errors()  # the same classes the file-based fake (fake_nvml/pynvml.py) raises
    NVMLError = errors.NVMLError
    NVMLError_LibraryNotFound = errors.NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = errors.NVMLError_DriverNotLoaded
    NVMLError_GpuIsLost = errors.NVMLError_GpuIsLost

    nv.NVMLError = NVMLError
    nv.NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    nv.NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    nv.NVMLError_GpuIsLost = NVMLError_GpuIsLost
    nv.NVML_CLOCK_SM = 1
    nv.NVML_PCIE_UTIL_TX_BYTES = 0
    nv.NVML_PCIE_UTIL_RX_BYTES = 1
    nv.lost = set()
    nv.calls = 0
    nv.shutdowns = 0
    util = util or {}

    def init():
        if init_error == 12:
            raise NVMLError_LibraryNotFound(12)
        if init_error == 9:
            raise NVMLError_DriverNotLoaded(9)

    def check(h):
        nv.calls += 1
        if h in nv.lost:
            raise NVMLError_GpuIsLost(15)
        return h

    nv.nvmlInit = init
    nv.nvmlShutdown = lambda: setattr(nv, "shutdowns", nv.shutdowns + 1)
    nv.nvmlDeviceGetCount = lambda: len(uuids)
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetUUID = lambda h: uuids[check(h)]
    nv.nvmlDeviceGetName = lambda h: (names or ["Fake GPU"] * len(uuids))[check(h)]
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=(check(h) + 1) * 2**30, total=80 * 2**30)
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=util.get(check(h), 10.0 * (h + 1)), memory=5)
    nv.nvmlDeviceGetClockInfo = lambda h, kind: 1000 + check(h)
    nv.nvmlDeviceGetPcieThroughput = lambda h, kind: 100 * (check(h) + 1) + kind
    nv.nvmlDeviceGetPowerUsage = lambda h: 250000 + check(h)
    nv.compute = dict(compute or {})
    nv.graphics = dict(graphics or {})

    def listed(table):
        return lambda h: [types.SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF,
                                                computeInstanceId=0xFFFFFFFF)
                          for pid, used in table.get(check(h), [])]

    nv.nvmlDeviceGetComputeRunningProcesses = listed(nv.compute)
    nv.nvmlDeviceGetGraphicsRunningProcesses = listed(nv.graphics)
    nv.nvmlSystemGetDriverVersion = lambda: "555.42.06"
    return nv
