"""GPU side of the sampler: NVML readings per visible device, or a null backend.

Every NVML query here returns ``None`` instead of raising (nvitop's habit), so
a GPU that falls off the bus mid-run leaves a gap in its curves while CPU and
memory sampling carry on.

NVML numbers devices in PCI bus order; CUDA numbers the devices that
``CUDA_VISIBLE_DEVICES`` leaves, in the order it lists them. Devices are
therefore matched by UUID: exactly, when the caller knows CUDA's UUIDs (torch
in the same process), else by reading ``CUDA_VISIBLE_DEVICES`` the way the
CUDA runtime does. Integer entries there are taken as NVML (PCI) indices,
which is what CUDA uses with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and, in
practice, on machines with one GPU model.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

from feedprof.store import GpuInfo, GpuStatus
from types import ModuleType

NVML_SAMPLE_FLOOR_S = 0.2  # NVML averages utilisation over 1/6 s to 1 s: faster adds nothing


@dataclass(frozen=True)
class GpuReading:
    util_pct: Optional[float]
    mem_used_bytes: Optional[int]
    sm_clock_mhz: Optional[int]
    pcie_rx_bytes_per_s: Optional[int]
    pcie_tx_bytes_per_s: Optional[int]
    power_w: Optional[float]


@dataclass(frozen=True)
class GpuProcessReading:
    """One process NVML says has a context on a device."""

    pid: int
    used_bytes: Optional[int]  # None: NVML does not say (no privileges under MIG, Windows WDDM)
    kind: str  # "C" compute, "G" graphics, "C+G" both (nvidia-smi's letters)


# Newest first: pynvml's unversioned names call the latest NVML entry point,
# which an older driver lacks (NVMLError_FunctionNotFound).
_PROCESS_QUERIES = (("C", ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2")),
                    ("G", ("nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses_v2")))


class NullGpu:
    """No GPU data, and why: a status code plus NVML's own words, if any."""

    def __init__(self, status: GpuStatus, detail: str = ""):
        self.status = status
        self.detail = detail
        self.devices: Tuple[GpuInfo, ...] = ()

    def read(self) -> Tuple[GpuReading, ...]:
        return ()

    def processes(self) -> Tuple[Optional[Tuple[GpuProcessReading, ...]], ...]:
        return ()

    def driver_version(self) -> Optional[str]:
        return None

    def close(self) -> None:
        pass


def _import_pynvml() -> ModuleType:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def parse_visible_devices(value: Optional[str], nvml_uuids: Sequence[str]) -> List[int]:
    """NVML indices of the devices CUDA will see, in CUDA ordinal order.

    Follows the CUDA runtime: ``None`` (unset) shows every device; entries are
    integers or (prefixes of) ``GPU-``/``MIG-`` UUIDs; the list ends at the
    first entry that is invalid or repeated.
    """
    n = len(nvml_uuids)
    if value is None:
        return list(range(n))
    picked: List[int] = []
    for token in (t.strip() for t in value.split(",")):
        if not token:
            break
        if token.lstrip("-").isdigit():
            idx = int(token)
            if not 0 <= idx < n:
                break
        else:
            matches = [i for i, u in enumerate(nvml_uuids) if u.startswith(token)]
            if len(matches) != 1:  # unknown or ambiguous prefix
                break
            idx = matches[0]
        if idx in picked:
            break
        picked.append(idx)
    return picked


class NvmlGpu:
    def __init__(self, nvml: ModuleType, handles: Sequence[object], devices: Sequence[GpuInfo]):
        self._nvml = nvml
        self._handles = list(handles)
        self.devices = tuple(devices)
        self.status = GpuStatus.OK
        self.detail = ""
        self._memory_v2 = True  # until the driver says it has no v2 query: then v1, without asking again

    def _q(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self._nvml.NVMLError:
            return None

    def read(self) -> Tuple[GpuReading, ...]:
        nv = self._nvml
        out = []
        for h in self._handles:
            util = self._q(nv.nvmlDeviceGetUtilizationRates, h)
            mem, self._memory_v2 = memory_info(nv, h, self._memory_v2)
            rx = self._q(nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_RX_BYTES)
            tx = self._q(nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_TX_BYTES)
            power_mw = self._q(nv.nvmlDeviceGetPowerUsage, h)
            out.append(GpuReading(
                util_pct=None if util is None else float(util.gpu),
                mem_used_bytes=None if mem is None else int(mem.used),
                sm_clock_mhz=self._q(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                pcie_rx_bytes_per_s=None if rx is None else int(rx) * 1024,  # NVML says KB/s
                pcie_tx_bytes_per_s=None if tx is None else int(tx) * 1024,
                power_w=None if power_mw is None else power_mw / 1000.0,
            ))
        return tuple(out)

    def processes(self) -> Tuple[Optional[Tuple[GpuProcessReading, ...]], ...]:
        """Per device (CUDA order): the processes on it, or None where NVML would not say."""
        return tuple(self._processes_on(h) for h in self._handles)

    def _processes_on(self, handle: object) -> Optional[Tuple[GpuProcessReading, ...]]:
        found: dict = {}  # pid -> [used_bytes, kinds]
        answered = False
        for kind, names in _PROCESS_QUERIES:
            listed = None
            for name in names:
                fn = getattr(self._nvml, name, None)
                listed = None if fn is None else self._q(fn, handle)
                if listed is not None:
                    break
            if listed is None:
                continue
            answered = True
            for p in listed:
                used = getattr(p, "usedGpuMemory", None)
                entry = found.setdefault(int(p.pid), [None, ""])
                if used is not None:  # listed twice (C+G): the same context, not twice the memory
                    entry[0] = max(int(used), entry[0] or 0)
                entry[1] = kind if not entry[1] else f"{entry[1]}+{kind}"
        if not answered:
            return None
        return tuple(GpuProcessReading(pid=pid, used_bytes=used, kind=kinds)
                     for pid, (used, kinds) in sorted(found.items()))

    def driver_version(self) -> Optional[str]:
        version = self._q(self._nvml.nvmlSystemGetDriverVersion) \
            if hasattr(self._nvml, "nvmlSystemGetDriverVersion") else None
        return version.decode() if isinstance(version, bytes) else version

    def close(self) -> None:
        self._q(self._nvml.nvmlShutdown)


def open_gpu(nvml: Optional[ModuleType] = None, visible_devices: Optional[str] = None,
             cuda_uuids: Optional[Sequence[str]] = None, use_env: bool = True):
    """An NvmlGpu for the CUDA-visible devices, or a NullGpu saying why not.

    ``cuda_uuids``: UUIDs in CUDA ordinal order when known exactly (e.g. from
    ``torch.cuda.get_device_properties(i).uuid``); otherwise the mapping comes
    from ``visible_devices`` (default: the CUDA_VISIBLE_DEVICES variable).
    """
    nv = nvml if nvml is not None else _import_pynvml()
    if nv is None:
        return NullGpu(GpuStatus.NO_PYNVML)
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        return _failed(nv, exc)
    try:
        count = nv.nvmlDeviceGetCount()
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        uuids = [str(nv.nvmlDeviceGetUUID(h)) for h in handles]
    except nv.NVMLError as exc:
        _shutdown(nv)
        return _failed(nv, exc)
    if cuda_uuids:
        wanted = [u if u.startswith(("GPU-", "MIG-")) else f"GPU-{u}" for u in cuda_uuids]
        order = [uuids.index(u) for u in wanted if u in uuids]
    else:
        if use_env and visible_devices is None:
            visible_devices = os.environ.get("CUDA_VISIBLE_DEVICES")
        order = parse_visible_devices(visible_devices, uuids)
    if not order:
        _shutdown(nv)
        return NullGpu(GpuStatus.NO_GPU if count == 0 else GpuStatus.ALL_HIDDEN)
    devices = []
    for cuda_index, nvml_index in enumerate(order):
        h = handles[nvml_index]
        mem = _query(nv, nv.nvmlDeviceGetMemoryInfo, h)
        devices.append(GpuInfo(
            nvml_index=nvml_index, cuda_index=cuda_index, uuid=uuids[nvml_index],
            name=str(_query(nv, nv.nvmlDeviceGetName, h) or "unknown GPU"),
            mem_total_bytes=None if mem is None else int(mem.total),
        ))
    return NvmlGpu(nv, [handles[i] for i in order], devices)


def memory_info(nv: ModuleType, h: object, try_v2: bool = True) -> Tuple[Any, bool]:
    """The device's memory as nvidia-smi shows it (or None), and whether to ask v2 next time.
    NVML's v2 query leaves out what the driver reserves for itself, which v1 counts as used: on an
    H200 v1 read 1249 MiB used where nvidia-smi read 621 (docs/benchmarks.md, "On a GPU")."""
    v2 = getattr(nv, "nvmlMemory_v2", None) if try_v2 else None
    if v2 is not None:
        try:
            return nv.nvmlDeviceGetMemoryInfo(h, version=v2), True
        except (nv.NVMLError, TypeError):  # a driver without the _v2 call (NVML says "function not found")
            pass
    return _query(nv, nv.nvmlDeviceGetMemoryInfo, h), False


def _query(nv: Any, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except nv.NVMLError:
        return None


def _shutdown(nv: ModuleType) -> None:
    _query(nv, nv.nvmlShutdown)


def _failed(nv: ModuleType, exc: Exception) -> NullGpu:
    if isinstance(exc, getattr(nv, "NVMLError_LibraryNotFound", ())):
        return NullGpu(GpuStatus.NO_LIBRARY)
    if isinstance(exc, getattr(nv, "NVMLError_DriverNotLoaded", ())):
        return NullGpu(GpuStatus.NO_DRIVER)
    return NullGpu(GpuStatus.NVML_ERROR, str(exc))


def torch_cuda_uuids() -> Optional[List[str]]:
    """CUDA's own device UUIDs when torch has already initialised CUDA in this
    process (never imports torch or initialises CUDA itself)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_initialized():
            return None
        return [str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count())]
    except (RuntimeError, AttributeError):  # older torch without .uuid, or a broken CUDA
        return None
