"""A stand-in for nvidia-ml-py with one GPU that falls off the bus 1.5 s after
nvmlInit (NVMLError_GpuIsLost from then on). Put this directory first on
PYTHONPATH to run the real feedprof CLI against it (tests/test_faults.py).

FEEDPROF_FAKE_NVML_PROCESSES="PID:BYTES,PID:BYTES" lists those processes as
running compute work on the GPU (tests/test_gpus.py)."""
import os
import time
import types

LOST_AFTER_S = 1.5
NVML_CLOCK_SM = 1
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
_t0 = None


class NVMLError(Exception):
    def __init__(self, value=999):
        super().__init__(value)
        self.value = value


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    pass


class NVMLError_GpuIsLost(NVMLError):
    pass


def nvmlInit():
    global _t0
    _t0 = time.monotonic()


def nvmlShutdown():
    pass


def _check(handle):
    if time.monotonic() - _t0 > LOST_AFTER_S:
        raise NVMLError_GpuIsLost(15)
    return handle


def nvmlDeviceGetCount():
    return 1


def nvmlDeviceGetHandleByIndex(i):
    return i


def nvmlDeviceGetUUID(h):
    return "GPU-fake-0000"


def nvmlDeviceGetName(h):
    return "Fake GPU (tests)"


def nvmlDeviceGetMemoryInfo(h):
    _check(h)
    return types.SimpleNamespace(used=2**30, total=16 * 2**30)


def nvmlDeviceGetUtilizationRates(h):
    _check(h)
    return types.SimpleNamespace(gpu=42, memory=10)


def nvmlDeviceGetClockInfo(h, kind):
    return 1500 + _check(h)


def nvmlDeviceGetPcieThroughput(h, kind):
    return 1000 + _check(h)


def nvmlDeviceGetPowerUsage(h):
    return 100000 + _check(h)


def nvmlSystemGetDriverVersion():
    return "555.42.06"


def nvmlDeviceGetComputeRunningProcesses(h):
    spec = os.environ.get("FEEDPROF_FAKE_NVML_PROCESSES", "")
    pairs = [item.split(":") for item in spec.split(",") if item]
    return [types.SimpleNamespace(pid=int(pid), usedGpuMemory=int(used)) for pid, used in pairs]


def nvmlDeviceGetGraphicsRunningProcesses(h):
    return []
