"""Per-GPU health snapshot through NVML, and the rules that turn it into a verdict.

`snapshot(nvml)` takes the NVML module as a parameter: a real node passes `pynvml`
(nvidia-ml-py) unchanged, tests pass a fake object with the same functions that raises the real
pynvml exception classes. A call the GPU does not support leaves its field `None`; other per-call
errors are kept in `GpuHealth.errors` instead of aborting the snapshot.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

from pitstop.config import NodeCheckSettings
from pitstop.models import CheckResult, CheckStatus
from pitstop.node.status import worst
from pitstop.node.xid import ACTION_STATUS, XID_CATALOG


class NvmlUnavailable(RuntimeError):
    """NVML could not start here (no driver, no library, no permission)."""


class NvLink(BaseModel):
    link: int
    active: bool | None = None
    replay_errors: int | None = None
    recovery_errors: int | None = None
    crc_flit_errors: int | None = None
    crc_data_errors: int | None = None


class GpuHealth(BaseModel):
    index: int
    uuid: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    name: str | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    sm_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = Field(default=None, description="nvmlDeviceGetMaxClockInfo(SM)")
    mem_clock_mhz: int | None = None
    power_limit_w: float | None = Field(default=None, description="enforced power limit")
    pcie_link_width: int | None = None
    pcie_link_width_max: int | None = Field(default=None, description="max for this GPU in this system")
    pcie_link_gen: int | None = None
    pcie_link_gen_max: int | None = None
    clock_event_reasons: list[str] | None = Field(default=None, description="active throttle reasons")
    ecc_volatile_sbe: int | None = None
    ecc_volatile_dbe: int | None = None
    ecc_aggregate_sbe: int | None = None
    ecc_aggregate_dbe: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    nvlinks: list[NvLink] | None = Field(default=None, description="None: no NVLink on this GPU")
    xid_events: list[int] = Field(default_factory=list, description="Xids seen live via NVML events")
    errors: dict[str, str] = Field(default_factory=dict, description="field -> NVML error text")


class NvmlSnapshot(BaseModel):
    driver_version: str | None = None
    cuda_driver_version: str | None = Field(default=None, description="CUDA version the driver supports, e.g. 12.4")
    gpus: list[GpuHealth] = Field(default_factory=list)


# Bit -> name for nvmlDeviceGetCurrentClocksEventReasons (values from nvml.h / pynvml).
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x001: "gpu_idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal_slowdown",
    0x040: "hw_thermal_slowdown",
    0x080: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
_HW_SLOWDOWNS = {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}

_NVLINK_COUNTERS = {
    "replay_errors": "NVML_NVLINK_ERROR_DL_REPLAY",
    "recovery_errors": "NVML_NVLINK_ERROR_DL_RECOVERY",
    "crc_flit_errors": "NVML_NVLINK_ERROR_DL_CRC_FLIT",
    "crc_data_errors": "NVML_NVLINK_ERROR_DL_CRC_DATA",
}


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    return str(value).strip("\x00").strip() or None


class _Caller:
    """Calls NVML functions; NOT_SUPPORTED gives None, other errors are recorded per field."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self._quiet = {
            getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3),
            getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13),
        }

    def __call__(self, errors: dict[str, str], field: str, fn_name: str, *args: Any) -> Any:
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            if getattr(exc, "value", None) not in self._quiet:
                errors[field] = str(exc)
            return None


def snapshot(nvml: Any, *, event_wait_ms: int = 0) -> NvmlSnapshot:
    """Read every GPU's health. Raises `NvmlUnavailable` only when NVML cannot start at all."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(str(exc)) from exc
    try:
        call = _Caller(nvml)
        init_errors: dict[str, str] = {}
        driver = _text(call(init_errors, "driver", "nvmlSystemGetDriverVersion"))
        cuda = _cuda_version(call(init_errors, "cuda", "nvmlSystemGetCudaDriverVersion"))
        count = call(init_errors, "count", "nvmlDeviceGetCount")
        if count is None:
            raise NvmlUnavailable(init_errors.get("count", "NVML cannot count the GPUs"))
        handles: list[Any] = []
        gpus: list[GpuHealth] = []
        for index in range(int(count)):
            errors: dict[str, str] = {}
            handle = call(errors, "handle", "nvmlDeviceGetHandleByIndex", index)
            handles.append(handle)
            gpus.append(_gpu(call, index, handle, errors) if handle is not None else GpuHealth(index=index, errors=errors))
        if event_wait_ms > 0:
            _collect_xid_events(call, handles, gpus, event_wait_ms)
        return NvmlSnapshot(driver_version=driver, cuda_driver_version=cuda, gpus=gpus)
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def _gpu(call: _Caller, index: int, h: Any, errors: dict[str, str]) -> GpuHealth:
    n = call.nvml
    pci = call(errors, "pci_bus_id", "nvmlDeviceGetPciInfo", h)
    power_mw = call(errors, "power_w", "nvmlDeviceGetPowerUsage", h)
    limit_mw = call(errors, "power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", h)
    gpu = GpuHealth(
        index=index,
        uuid=_text(call(errors, "uuid", "nvmlDeviceGetUUID", h)),
        serial=_text(call(errors, "serial", "nvmlDeviceGetSerial", h)),
        pci_bus_id=_text(getattr(pci, "busId", None)) if pci is not None else None,
        name=_text(call(errors, "name", "nvmlDeviceGetName", h)),
        temperature_c=call(errors, "temperature_c", "nvmlDeviceGetTemperature", h, n.NVML_TEMPERATURE_GPU),
        power_w=round(power_mw / 1000.0, 1) if power_mw is not None else None,
        sm_clock_mhz=call(errors, "sm_clock_mhz", "nvmlDeviceGetClockInfo", h, n.NVML_CLOCK_SM),
        max_sm_clock_mhz=call(errors, "max_sm_clock_mhz", "nvmlDeviceGetMaxClockInfo", h, n.NVML_CLOCK_SM),
        mem_clock_mhz=call(errors, "mem_clock_mhz", "nvmlDeviceGetClockInfo", h, n.NVML_CLOCK_MEM),
        power_limit_w=round(limit_mw / 1000.0, 1) if limit_mw is not None else None,
        pcie_link_width=call(errors, "pcie_link", "nvmlDeviceGetCurrPcieLinkWidth", h),
        pcie_link_width_max=call(errors, "pcie_link", "nvmlDeviceGetMaxPcieLinkWidth", h),
        pcie_link_gen=call(errors, "pcie_link", "nvmlDeviceGetCurrPcieLinkGeneration", h),
        pcie_link_gen_max=call(errors, "pcie_link", "nvmlDeviceGetMaxPcieLinkGeneration", h),
        clock_event_reasons=_clock_reasons(call, h, errors),
        ecc_volatile_sbe=call(errors, "ecc", "nvmlDeviceGetTotalEccErrors", h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC),
        ecc_volatile_dbe=call(errors, "ecc", "nvmlDeviceGetTotalEccErrors", h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC),
        ecc_aggregate_sbe=call(errors, "ecc", "nvmlDeviceGetTotalEccErrors", h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_AGGREGATE_ECC),
        ecc_aggregate_dbe=call(errors, "ecc", "nvmlDeviceGetTotalEccErrors", h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_AGGREGATE_ECC),
        retired_pages_sbe=_count(call(errors, "retired_pages", "nvmlDeviceGetRetiredPages", h, n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)),
        retired_pages_dbe=_count(call(errors, "retired_pages", "nvmlDeviceGetRetiredPages", h, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)),
        retired_pages_pending=_flag(call(errors, "retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus", h)),
        nvlinks=_nvlinks(call, h, errors),
        errors=errors,
    )
    rows = call(errors, "remapped_rows", "nvmlDeviceGetRemappedRows", h)
    if rows is not None and len(rows) == 4:
        gpu.remapped_rows_correctable, gpu.remapped_rows_uncorrectable = int(rows[0]), int(rows[1])
        gpu.remap_pending, gpu.remap_failure = bool(rows[2]), bool(rows[3])
    return gpu


def _cuda_version(value: Any) -> str | None:
    # nvmlSystemGetCudaDriverVersion: 1000 * major + 10 * minor (12040 -> "12.4"), as in nvml.h
    if not isinstance(value, int) or value <= 0:
        return None
    return f"{value // 1000}.{value % 1000 // 10}"


def _count(pages: Any) -> int | None:
    return None if pages is None else len(pages)


def _flag(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _clock_reasons(call: _Caller, h: Any, errors: dict[str, str]) -> list[str] | None:
    # The "ClocksEvent" name replaced "ClocksThrottle" in newer drivers; both return the same bits.
    mask = call(errors, "clock_event_reasons", "nvmlDeviceGetCurrentClocksEventReasons", h)
    if mask is None:
        mask = call(errors, "clock_event_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons", h)
    if mask is None:
        return None
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if int(mask) & bit]


def _nvlinks(call: _Caller, h: Any, errors: dict[str, str]) -> list[NvLink] | None:
    n = call.nvml
    links: list[NvLink] = []
    for link in range(int(getattr(n, "NVML_NVLINK_MAX_LINKS", 18))):
        probe: dict[str, str] = {}
        state = call(probe, "state", "nvmlDeviceGetNvLinkState", h, link)
        if state is None:
            # NOT_SUPPORTED / INVALID_ARGUMENT past the last link: that is the end of the list
            break
        counters = {
            field: call(errors, f"nvlink{link}_{field}", "nvmlDeviceGetNvLinkErrorCounter", h, link, getattr(n, const))
            for field, const in _NVLINK_COUNTERS.items()
        }
        links.append(NvLink(link=link, active=state == getattr(n, "NVML_FEATURE_ENABLED", 1), **counters))
    return links or None


def _collect_xid_events(call: _Caller, handles: list[Any], gpus: list[GpuHealth], wait_ms: int) -> None:
    n = call.nvml
    errors: dict[str, str] = {}
    event_set = call(errors, "events", "nvmlEventSetCreate")
    if event_set is None:
        return
    try:
        for handle in handles:
            if handle is not None:
                call(errors, "events", "nvmlDeviceRegisterEvents", handle, n.nvmlEventTypeXidCriticalError, event_set)
        by_uuid = {g.uuid: g for g in gpus if g.uuid}
        deadline = time.monotonic() + wait_ms / 1000.0
        while (left_ms := int((deadline - time.monotonic()) * 1000)) > 0:
            try:
                data = n.nvmlEventSetWait(event_set, left_ms)
            except n.NVMLError:  # NVML_ERROR_TIMEOUT: nothing (more) happened
                break
            if int(data.eventType) & n.nvmlEventTypeXidCriticalError:
                uuid = _text(call(errors, "events", "nvmlDeviceGetUUID", data.device))
                target = by_uuid.get(uuid) if uuid else None
                if target is not None:
                    target.xid_events.append(int(data.eventData))
    finally:
        call(errors, "events", "nvmlEventSetFree", event_set)


class GpuRule(NamedTuple):
    name: str
    status: CheckStatus
    applies: Callable[[GpuHealth, NodeCheckSettings], bool]
    message: str  # formatted with the GPU's fields and `t` (the settings)


def _live_xid_status(gpu: GpuHealth) -> CheckStatus:
    return worst(
        ACTION_STATUS.get(XID_CATALOG[x].immediate, CheckStatus.WARN) if x in XID_CATALOG else CheckStatus.WARN
        for x in gpu.xid_events
    )


# Health rules, most severe first. The first matching FAIL rule names the summary.
GPU_RULES: tuple[GpuRule, ...] = (
    GpuRule("gpu-lost", CheckStatus.FAIL, lambda g, t: any("lost" in e.lower() for e in g.errors.values()),
            "GPU {index} ({pci_bus_id}) is lost to the driver: drain and reboot the node"),
    GpuRule("row-remap-failure", CheckStatus.FAIL, lambda g, t: g.remap_failure is True,
            "GPU {index} ({pci_bus_id}): row remapping failed, no spare rows left: drain, replace the GPU"),
    GpuRule("volatile-dbe", CheckStatus.FAIL, lambda g, t: (g.ecc_volatile_dbe or 0) > 0,
            "GPU {index} ({pci_bus_id}): {ecc_volatile_dbe} uncorrectable ECC error(s) since reset: drain and reset the GPU"),
    GpuRule("nvlink-down", CheckStatus.FAIL, lambda g, t: any(link.active is False for link in g.nvlinks or []),
            "GPU {index} ({pci_bus_id}): NVLink down: drain, reset the GPU, check nvidia-smi nvlink -s"),
    GpuRule("temperature-fail", CheckStatus.FAIL, lambda g, t: (g.temperature_c or 0) >= t.gpu_temp_fail_c,
            "GPU {index} ({pci_bus_id}) at {temperature_c} C (limit {t.gpu_temp_fail_c} C): drain, check cooling"),
    GpuRule("live-xid-fail", CheckStatus.FAIL, lambda g, t: _live_xid_status(g) is CheckStatus.FAIL,
            "GPU {index} ({pci_bus_id}) raised Xid {xid_events}: drain, follow the Xid's action"),
    GpuRule("retired-pages-pending", CheckStatus.WARN, lambda g, t: g.retired_pages_pending is True,
            "GPU {index} ({pci_bus_id}): retired pages pending: reset the GPU when idle"),
    GpuRule("row-remap-pending", CheckStatus.WARN, lambda g, t: g.remap_pending is True,
            "GPU {index} ({pci_bus_id}): row remap pending: reset the GPU when idle"),
    GpuRule("temperature-warn", CheckStatus.WARN, lambda g, t: (g.temperature_c or 0) >= t.gpu_temp_warn_c,
            "GPU {index} ({pci_bus_id}) at {temperature_c} C (warn at {t.gpu_temp_warn_c} C)"),
    GpuRule("hw-slowdown", CheckStatus.WARN, lambda g, t: bool(set(g.clock_event_reasons or []) & _HW_SLOWDOWNS),
            "GPU {index} ({pci_bus_id}) clocks held down by hardware: {clock_event_reasons}"),
    GpuRule("nvlink-recovery", CheckStatus.WARN, lambda g, t: any((link.recovery_errors or 0) > 0 for link in g.nvlinks or []),
            "GPU {index} ({pci_bus_id}): NVLink recovery errors: watch for Xid 74"),
    GpuRule("live-xid-warn", CheckStatus.WARN, lambda g, t: bool(g.xid_events),
            "GPU {index} ({pci_bus_id}) raised Xid {xid_events}"),
    GpuRule("nvml-errors", CheckStatus.WARN, lambda g, t: bool(g.errors),
            "GPU {index} ({pci_bus_id}): NVML could not read {errors}"),
)


def findings(snap: NvmlSnapshot, settings: NodeCheckSettings) -> list[tuple[GpuRule, GpuHealth, str]]:
    """Every rule that matched, per GPU. Pure: no NVML calls."""
    found = []
    for gpu in snap.gpus:
        fields = gpu.model_dump()
        fields["errors"] = ", ".join(f"{k} ({v})" for k, v in gpu.errors.items())
        for rule in GPU_RULES:
            if rule.applies(gpu, settings):
                found.append((rule, gpu, rule.message.format(t=settings, **fields)))
    return found


def evaluate(snap: NvmlSnapshot, settings: NodeCheckSettings) -> CheckResult:
    found = findings(snap, settings)
    status = worst(rule.status for rule, _, _ in found)
    details = {
        "driver_version": snap.driver_version,
        "cuda_driver_version": snap.cuda_driver_version,
        "gpus": [g.model_dump() for g in snap.gpus],
        "findings": [{"rule": r.name, "status": r.status.value, "gpu": g.index, "message": m} for r, g, m in found],
    }
    if not snap.gpus:
        return CheckResult(name="nvml", status=CheckStatus.UNAVAILABLE, summary="NVML sees no GPUs on this node", details=details)
    if status is CheckStatus.OK:
        summary = f"{len(snap.gpus)} GPU(s) healthy (driver {snap.driver_version or 'unknown'})"
    else:
        first = next(m for r, _, m in found if r.status is status)
        others = sum(1 for r, _, _ in found if r.status is not CheckStatus.OK) - 1
        summary = first + (f" (+{others} more finding(s))" if others > 0 else "")
    return CheckResult(name="nvml", status=status, summary=summary, details=details)


def check_nvml(settings: NodeCheckSettings, nvml: Any | None = None) -> CheckResult:
    """The NVML check: real `pynvml` unless a module-like object is injected."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return CheckResult(name="nvml", status=CheckStatus.UNAVAILABLE,
                               summary="nvidia-ml-py (pynvml) is not installed on this node")
    try:
        snap = snapshot(nvml, event_wait_ms=settings.nvml_event_wait_ms)
    except NvmlUnavailable as exc:
        return CheckResult(
            name="nvml",
            status=CheckStatus.UNAVAILABLE,
            summary=f"NVML unavailable: {exc} (no NVIDIA driver loaded on this node?)",
            details={"error": str(exc)},
        )
    return evaluate(snap, settings)
