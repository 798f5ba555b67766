"""NVML snapshot and health rules: a fake NVML object with the real pynvml errors, and real pynvml."""

from __future__ import annotations

import pynvml
import pytest

from pitstop.config import NodeCheckSettings
from pitstop.models import CheckStatus
from pitstop.node.nvml import GPU_RULES, NvmlUnavailable, check_nvml, snapshot
from tests.node.fake_nvml import NOT_SUPPORTED, FakeGpu, FakeNvml

SETTINGS = NodeCheckSettings()
UNC, VOL = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC


def two_gpus() -> list[FakeGpu]:
    return [FakeGpu(), FakeGpu(uuid="GPU-11111111-2222-3333-4444-555555555555", bus_id="00000000:86:00.0", serial="1654523005678")]


def test_healthy_gpus_snapshot_every_field() -> None:
    fake = FakeNvml(two_gpus())
    snap = snapshot(fake)
    assert fake.initialized == 0  # nvmlShutdown always follows nvmlInit
    gpu = snap.gpus[1]
    assert (gpu.uuid, gpu.serial, gpu.pci_bus_id) == ("GPU-11111111-2222-3333-4444-555555555555", "1654523005678", "00000000:86:00.0")
    assert gpu.temperature_c == 41 and gpu.power_w == 71.0 and gpu.sm_clock_mhz == 1980
    assert gpu.clock_event_reasons == ["gpu_idle"]
    assert gpu.ecc_volatile_dbe == 0 and gpu.remap_failure is False and len(gpu.nvlinks or []) == 18
    result = check_nvml(SETTINGS, fake)
    assert result.status is CheckStatus.OK
    assert "2 GPU(s) healthy" in result.summary and "550.127.05" in result.summary


@pytest.mark.parametrize(
    ("change", "rule", "status"),
    [
        ({"ecc": {(UNC, VOL): 2}}, "volatile-dbe", CheckStatus.FAIL),
        ({"remapped_rows": (0, 3, 0, 1)}, "row-remap-failure", CheckStatus.FAIL),
        ({"remapped_rows": (2, 0, 1, 0)}, "row-remap-pending", CheckStatus.WARN),
        ({"retired_pending": 1}, "retired-pages-pending", CheckStatus.WARN),
        ({"temperature": 96}, "temperature-fail", CheckStatus.FAIL),
        ({"temperature": 88}, "temperature-warn", CheckStatus.WARN),
        ({"nvlink_states": [1, 1, 0, 1]}, "nvlink-down", CheckStatus.FAIL),
        ({"clock_reasons": 0x40}, "hw-slowdown", CheckStatus.WARN),
        ({"failing": {"nvmlDeviceGetTemperature": pynvml.NVML_ERROR_GPU_IS_LOST}}, "gpu-lost", CheckStatus.FAIL),
    ],
)
def test_each_health_rule_fires_on_its_condition(change: dict, rule: str, status: CheckStatus) -> None:
    gpus = two_gpus()
    for key, value in change.items():
        setattr(gpus[1], key, value)
    result = check_nvml(SETTINGS, FakeNvml(gpus))
    assert result.status is status
    fired = {(f["rule"], f["gpu"]) for f in result.details["findings"]}
    assert (rule, 1) in fired and not any(g == 0 for _, g in fired)
    assert "GPU 1 (00000000:86:00.0)" in result.summary


def test_rules_are_a_table_with_unique_names() -> None:
    names = [r.name for r in GPU_RULES]
    assert len(names) == len(set(names)) and len(names) >= 10


def test_not_supported_calls_leave_fields_none_without_a_finding() -> None:
    gpu = FakeGpu(failing={
        "nvmlDeviceGetRemappedRows": NOT_SUPPORTED,
        "nvmlDeviceGetNvLinkState": NOT_SUPPORTED,  # a PCIe card: no NVLink at all
        "nvmlDeviceGetRetiredPages": NOT_SUPPORTED,
        "nvmlDeviceGetCurrentClocksEventReasons": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,  # old driver
    })
    result = check_nvml(SETTINGS, FakeNvml([gpu]))
    detail = result.details["gpus"][0]
    assert detail["remap_failure"] is None and detail["nvlinks"] is None and detail["retired_pages_dbe"] is None
    assert detail["clock_event_reasons"] == ["gpu_idle"]  # fell back to ...ThrottleReasons
    assert detail["errors"] == {}
    assert result.status is CheckStatus.OK


def test_other_per_call_errors_are_kept_and_warned() -> None:
    gpu = FakeGpu(failing={"nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_NO_PERMISSION})
    result = check_nvml(SETTINGS, FakeNvml([gpu]))
    assert result.status is CheckStatus.WARN
    assert result.details["gpus"][0]["errors"] == {"power_w": "Insufficient Permissions"}
    assert "power_w (Insufficient Permissions)" in result.summary


def test_live_xid_events_from_the_event_set() -> None:
    fake = FakeNvml(two_gpus(), pending_xids=[(1, 79), (0, 13)])
    result = check_nvml(NodeCheckSettings(nvml_event_wait_ms=50), fake)
    assert fake.registered == [0, 1]
    gpus = result.details["gpus"]
    assert gpus[1]["xid_events"] == [79] and gpus[0]["xid_events"] == [13]
    assert result.status is CheckStatus.FAIL
    assert "Xid [79]" in result.summary


def test_init_failure_is_unavailable_with_the_nvml_reason() -> None:
    result = check_nvml(SETTINGS, FakeNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    assert result.status is CheckStatus.UNAVAILABLE
    assert "Driver Not Loaded" in result.summary
    with pytest.raises(NvmlUnavailable):
        snapshot(FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))


def test_no_gpus_is_unavailable_not_healthy() -> None:
    assert check_nvml(SETTINGS, FakeNvml([])).status is CheckStatus.UNAVAILABLE


def test_real_pynvml_without_a_driver_degrades_to_unavailable() -> None:
    try:  # on a real GPU node this test checks the opposite: a real snapshot
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        has_driver = True
    except pynvml.NVMLError:
        has_driver = False
    result = check_nvml(SETTINGS)  # no injection: the real pynvml module
    if has_driver:
        assert result.status is not CheckStatus.UNAVAILABLE and result.details["gpus"]
    else:
        assert result.status is CheckStatus.UNAVAILABLE
        assert "NVML Shared Library Not Found" in result.summary or "Driver" in result.summary
