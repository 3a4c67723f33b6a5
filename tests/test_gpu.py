"""NVML backend: CUDA ordinal mapping by UUID, the null backend, and a real-GPU check."""
import shutil
import types

import pytest

from feedprof.record.gpu import NullGpu, NvmlGpu, open_gpu, parse_visible_devices
from feedprof.render.words import gpu_status
from feedprof.store import GpuStatus
from tests.fakes import fake_pynvml

UUIDS = ["GPU-1111-aaaa", "GPU-2222-bbbb", "GPU-3333-cccc"]


@pytest.mark.parametrize("value,expected", [
    (None, [0, 1, 2]),
    ("", []),
    ("2,0", [2, 0]),
    ("1", [1]),
    ("0,7,1", [0]),  # an invalid entry ends the list, as in CUDA
    ("1,1", [1]),  # so does a repeat
    ("-1", []),
    ("GPU-3333,GPU-1111-aaaa", [2, 0]),  # UUIDs and unique prefixes
    ("GPU-", []),  # an ambiguous prefix is invalid
    ("GPU-2222-bbbb, 0", [1, 0]),
])
def test_parse_visible_devices(value, expected):
    assert parse_visible_devices(value, UUIDS) == expected


def test_reordered_visible_devices_map_cuda_ordinals_to_the_right_gpu():
    nv = fake_pynvml(UUIDS, names=["A", "B", "C"], util={0: 11.0, 1: 22.0, 2: 33.0})
    gpu = open_gpu(nvml=nv, visible_devices="2,GPU-1111")
    assert isinstance(gpu, NvmlGpu)
    assert [(d.cuda_index, d.nvml_index, d.name) for d in gpu.devices] == [(0, 2, "C"), (1, 0, "A")]
    assert [r.util_pct for r in gpu.read()] == [33.0, 11.0]


def test_exact_uuids_from_cuda_win_over_the_environment():
    nv = fake_pynvml(UUIDS)
    gpu = open_gpu(nvml=nv, visible_devices="0,1,2", cuda_uuids=["3333-cccc", "GPU-2222-bbbb"])
    assert [d.nvml_index for d in gpu.devices] == [2, 1]


def test_units():
    nv = fake_pynvml(UUIDS[:1])
    r = open_gpu(nvml=nv, visible_devices=None).read()[0]
    assert r.pcie_rx_bytes_per_s == 101 * 1024  # NVML reports KB/s
    assert r.power_w == pytest.approx(250.0)
    assert r.sm_clock_mhz == 1000
    assert r.mem_used_bytes == 2**30


RESERVED = 600 * 2**20  # what the driver keeps for itself (about 627 MiB on an H200)


def _memory_v1_v2(nv, v2_fails=False, asked=None):
    """NVML's two memory queries: v1 counts the driver's reserve as used, v2 apart (``asked``: each
    query's version, in order)."""
    nv.nvmlMemory_v2 = 0x02000028

    def info(h, version=None):
        if asked is not None:
            asked.append(version)
        if version and v2_fails:
            raise nv.NVMLError(13)  # NVML_ERROR_FUNCTION_NOT_FOUND
        return types.SimpleNamespace(used=2**30 + (0 if version else RESERVED), total=80 * 2**30)
    nv.nvmlDeviceGetMemoryInfo = info
    return nv


def test_memory_used_is_what_nvidia_smi_shows_without_the_drivers_reserve():
    gpu = open_gpu(nvml=_memory_v1_v2(fake_pynvml(UUIDS[:1])), visible_devices=None)
    assert gpu.read()[0].mem_used_bytes == 2**30


def test_a_driver_without_the_v2_memory_query_reads_v1_and_asks_v2_once():
    asked = []
    gpu = open_gpu(nvml=_memory_v1_v2(fake_pynvml(UUIDS[:1]), v2_fails=True, asked=asked), visible_devices=None)
    del asked[:]  # (what opening it asked)
    assert [gpu.read()[0].mem_used_bytes for _ in range(3)] == [2**30 + RESERVED] * 3
    assert asked == [0x02000028, None, None, None]  # a sample every 0.5 s does not pay a failed call each time


@pytest.mark.parametrize("err,status,words", [(12, GpuStatus.NO_LIBRARY, "NVML library not found"),
                                              (9, GpuStatus.NO_DRIVER, "driver not loaded")])
def test_null_backend_says_why(err, status, words):
    gpu = open_gpu(nvml=fake_pynvml(UUIDS, init_error=err))
    assert isinstance(gpu, NullGpu)
    assert gpu.status is status
    assert gpu_status(gpu.status, gpu.detail).startswith("not available — ") and words in gpu_status(gpu.status)
    assert gpu.read() == () and gpu.devices == ()


def test_everything_hidden():
    gpu = open_gpu(nvml=fake_pynvml(UUIDS), visible_devices="")
    assert isinstance(gpu, NullGpu) and gpu.status is GpuStatus.ALL_HIDDEN
    assert "hides every GPU" in gpu_status(gpu.status)


def test_this_machine_without_a_gpu_gets_the_null_backend():
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has an NVIDIA driver")
    gpu = open_gpu()
    assert isinstance(gpu, NullGpu)
    assert gpu.status in (GpuStatus.NO_PYNVML, GpuStatus.NO_LIBRARY, GpuStatus.NO_DRIVER, GpuStatus.NO_GPU)
    assert "not available" in gpu_status(gpu.status)


@pytest.mark.gpu
def test_real_nvml_matches_nvidia_smi():
    """Runs where there is a GPU: the sampler's reading against nvidia-smi's."""
    import subprocess

    if not shutil.which("nvidia-smi"):
        pytest.skip("no NVIDIA GPU on this machine")
    gpu = open_gpu()
    assert isinstance(gpu, NvmlGpu), gpu.status
    smi = subprocess.run(["nvidia-smi", "--query-gpu=uuid,memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    smi_uuids = [line.split(",")[0].strip() for line in smi.strip().splitlines()]
    assert {d.uuid for d in gpu.devices} <= set(smi_uuids)
    for reading in gpu.read():
        assert reading.util_pct is not None and 0 <= reading.util_pct <= 100
        assert reading.mem_used_bytes is not None
