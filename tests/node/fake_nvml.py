"""A fake NVML module for tests: the pynvml functions Pitstop calls, over in-memory GPUs.

Constants and exception classes are the real ones from `pynvml` (looked up on demand), so the
code under test cannot tell this object from the module, and errors are the real
`pynvml.NVMLError_*` classes a driver would raise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)  # maps to the right subclass, e.g. NVMLError_NotSupported


NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


@dataclass
class FakeGpu:
    uuid: str = "GPU-6b1d3c8e-0f4a-4c1e-9a57-2f3c5d7e9b10"
    serial: str = "1654523001234"
    bus_id: str = "00000000:3B:00.0"
    name: str = "NVIDIA H100 80GB HBM3"
    temperature: int = 41
    power_mw: int = 71_000
    sm_clock: int = 1980
    mem_clock: int = 2619
    clock_reasons: int = 0x1  # gpu_idle
    ecc: dict[tuple[int, int], int] = field(default_factory=dict)  # (error type, counter type) -> n
    retired_sbe: list[int] = field(default_factory=list)
    retired_dbe: list[int] = field(default_factory=list)
    retired_pending: int = 0
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)
    nvlink_states: list[int] = field(default_factory=lambda: [1] * 18)
    nvlink_errors: dict[tuple[int, int], int] = field(default_factory=dict)
    # function name -> NVML error code the call raises on this GPU
    failing: dict[str, int] = field(default_factory=dict)


class FakeNvml:
    def __init__(self, gpus: list[FakeGpu], *, init_error: int | None = None,
                 pending_xids: list[tuple[int, int]] | None = None, driver: str = "550.127.05") -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.pending_xids = list(pending_xids or [])  # (gpu index, xid) delivered by the event set
        self.driver = driver
        self.initialized = 0
        self.registered: list[int] = []

    def __getattr__(self, name: str) -> Any:  # constants and exception classes: the real ones
        if name.startswith(("NVML_", "NVMLError", "nvmlEventType", "nvmlClocks")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    # --- library ---
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise nvml_error(self.init_error)
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        if not 0 <= index < len(self.gpus):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[index]

    def _gate(self, gpu: FakeGpu, fn: str) -> None:
        if fn in gpu.failing:
            raise nvml_error(gpu.failing[fn])

    # --- identity and telemetry ---
    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        self._gate(h, "nvmlDeviceGetUUID")
        return h.uuid

    def nvmlDeviceGetSerial(self, h: FakeGpu) -> str:
        self._gate(h, "nvmlDeviceGetSerial")
        return h.serial

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        return h.name

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> SimpleNamespace:
        self._gate(h, "nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=h.bus_id.encode())  # ctypes structs hold bytes

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        self._gate(h, "nvmlDeviceGetTemperature")
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return h.temperature

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        self._gate(h, "nvmlDeviceGetPowerUsage")
        return h.power_mw

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, clock: int) -> int:
        self._gate(h, "nvmlDeviceGetClockInfo")
        return {pynvml.NVML_CLOCK_SM: h.sm_clock, pynvml.NVML_CLOCK_MEM: h.mem_clock}[clock]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:
        self._gate(h, "nvmlDeviceGetCurrentClocksEventReasons")
        return h.clock_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: FakeGpu) -> int:
        self._gate(h, "nvmlDeviceGetCurrentClocksThrottleReasons")
        return h.clock_reasons

    def nvmlDeviceGetTotalEccErrors(self, h: FakeGpu, error_type: int, counter_type: int) -> int:
        self._gate(h, "nvmlDeviceGetTotalEccErrors")
        return h.ecc.get((error_type, counter_type), 0)

    def nvmlDeviceGetRetiredPages(self, h: FakeGpu, cause: int) -> list[int]:
        self._gate(h, "nvmlDeviceGetRetiredPages")
        dbe = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
        return list(h.retired_dbe if cause == dbe else h.retired_sbe)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: FakeGpu) -> int:
        self._gate(h, "nvmlDeviceGetRetiredPagesPendingStatus")
        return h.retired_pending

    def nvmlDeviceGetRemappedRows(self, h: FakeGpu) -> tuple[int, int, int, int]:
        self._gate(h, "nvmlDeviceGetRemappedRows")
        return h.remapped_rows

    def nvmlDeviceGetNvLinkState(self, h: FakeGpu, link: int) -> int:
        self._gate(h, "nvmlDeviceGetNvLinkState")
        if link >= len(h.nvlink_states):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return h.nvlink_states[link]

    def nvmlDeviceGetNvLinkErrorCounter(self, h: FakeGpu, link: int, counter: int) -> int:
        self._gate(h, "nvmlDeviceGetNvLinkErrorCounter")
        return h.nvlink_errors.get((link, counter), 0)

    # --- events ---
    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, h: FakeGpu, event_types: int, event_set: object) -> None:
        self._gate(h, "nvmlDeviceRegisterEvents")
        assert event_types & pynvml.nvmlEventTypeXidCriticalError
        self.registered.append(self.gpus.index(h))

    def nvmlEventSetWait(self, event_set: object, timeout_ms: int) -> SimpleNamespace:
        if not self.pending_xids:
            raise nvml_error(pynvml.NVML_ERROR_TIMEOUT)
        index, xid = self.pending_xids.pop(0)
        return SimpleNamespace(device=self.gpus[index], eventType=pynvml.nvmlEventTypeXidCriticalError,
                               eventData=xid, gpuInstanceId=0, computeInstanceId=0)

    def nvmlEventSetFree(self, event_set: object) -> None:
        return None
