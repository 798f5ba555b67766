"""Silent stragglers: GPUs and nodes of one health sweep that run well below the rest of the fleet.

A GPU that trained its PCIe link at x8, or whose clocks the hardware holds down, fails no check
and crashes nothing; it makes every synchronous step of the job on it slower. Pure: the sweep
hands in every node's `pitstop node-check --json` report, this returns the flags with their
evidence (the value, the fleet's median, the spread).

Two kinds of evidence:
- hard facts flag on their own: a link narrower than the slot allows, an active hardware
  slowdown, power-brake or thermal throttle reason (NVML's clocks-event reasons, below);
- a metric flags when it sits beyond the fleet's median by the modified z-score (Iglewicz and
  Hoaglin, "How to Detect and Handle Outliers", 1993: 0.6745 (x - median) / MAD > 3.5) AND by at
  least a minimum gap (settings.stragglers.min_gap), so a tight fleet (MAD near 0) does not flag
  noise. Fewer comparable GPUs than `min_fleet`: no statistics, only hard facts.

Besides, the fleet check: a node whose driver or CUDA version is not the fleet majority's.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Hashable
from typing import Literal, NamedTuple, TypeVar

from pydantic import BaseModel, Field

from pitstop.config import StragglerSettings
from pitstop.models import Cause, CheckStatus, NodeCheckReport
from pitstop.node.nvml import GpuHealth
from pitstop.node.pcie import PcieLink

K = TypeVar("K", bound=Hashable)
MAD_TO_Z = 0.6745  # Iglewicz & Hoaglin: makes the MAD comparable to a standard deviation

# NVML clocks-event reasons that mean the hardware itself is holding the clocks down (NVML API
# reference, nvmlClocksEventReasons: HwSlowdown "reducing the core clocks by a factor of 2 or
# more", HwThermalSlowdown, HwPowerBrakeSlowdown "external power brake assertion",
# SwThermalSlowdown "temperature above the max operating temperature"). SwPowerCap alone is a
# busy GPU at its power limit, which is normal, and is judged by the fleet instead.
HARD_THROTTLE = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")


class GpuTelemetry(BaseModel):
    """One GPU as the sweep saw it: what straggler detection compares across the fleet."""

    node: str
    index: int
    pci_bus_id: str | None = None
    model: str | None = Field(default=None, description="NVML name; GPUs are compared within a model")
    sm_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: int | None = None
    clock_event_reasons: list[str] = Field(default_factory=list)
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    nvlink_errors: int | None = Field(default=None, description="replay+recovery+CRC counters, all links")
    ecc_correctable: int | None = Field(default=None, description="volatile corrected ECC errors (since reset)")

    @property
    def idle(self) -> bool:
        # An idle GPU drops its clocks and power by design (NVML GpuIdle): not comparable to busy ones.
        return "gpu_idle" in self.clock_event_reasons

    @property
    def label(self) -> str:
        return f"GPU {self.index}" + (f" ({self.pci_bus_id})" if self.pci_bus_id else "")


class NodeTelemetry(BaseModel):
    node: str
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: list[GpuTelemetry] = Field(default_factory=list)
    nic_links: list[PcieLink] = Field(default_factory=list)


def _pci_key(address: str | None) -> str | None:
    """`00000000:3B:00.0` (NVML) and `0000:3b:00.0` (sysfs) -> the same key."""
    if not address:
        return None
    parts = address.lower().split(":")
    if len(parts) != 3:
        return address.lower()
    try:
        return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
    except ValueError:
        return address.lower()


def _nvlink_errors(gpu: GpuHealth) -> int | None:
    if not gpu.nvlinks:
        return None
    counts = [getattr(link, f) for link in gpu.nvlinks
              for f in ("replay_errors", "recovery_errors", "crc_flit_errors", "crc_data_errors")]
    known = [c for c in counts if c is not None]
    return sum(known) if known else None


def telemetry_from_report(report: NodeCheckReport) -> NodeTelemetry:
    """What the nvml and pcie checks of one node-check report carry. A check that is missing,
    UNAVAILABLE or unreadable leaves its part empty; it never raises."""
    checks = {c.name: c for c in report.checks}
    out = NodeTelemetry(node=report.node)
    links: list[PcieLink] = []
    pcie = checks.get("pcie")
    if pcie is not None and pcie.status is not CheckStatus.UNAVAILABLE:
        for raw in pcie.details.get("links") or []:
            try:
                links.append(PcieLink.model_validate(raw))
            except ValueError:
                continue
    out.nic_links = [lk for lk in links if lk.kind == "nic"]
    gpu_links = {_pci_key(lk.address): lk for lk in links if lk.kind == "gpu"}
    nvml = checks.get("nvml")
    if nvml is None or nvml.status is CheckStatus.UNAVAILABLE:
        return out
    out.driver_version = nvml.details.get("driver_version") or None
    out.cuda_driver_version = nvml.details.get("cuda_driver_version") or None
    for raw in nvml.details.get("gpus") or []:
        try:
            gpu = GpuHealth.model_validate(raw)
        except ValueError:
            continue
        link = gpu_links.get(_pci_key(gpu.pci_bus_id))
        out.gpus.append(GpuTelemetry(
            node=report.node, index=gpu.index, pci_bus_id=gpu.pci_bus_id, model=gpu.name,
            sm_clock_mhz=gpu.sm_clock_mhz, max_sm_clock_mhz=gpu.max_sm_clock_mhz,
            power_w=gpu.power_w, power_limit_w=gpu.power_limit_w, temperature_c=gpu.temperature_c,
            clock_event_reasons=list(gpu.clock_event_reasons or []),
            # NVML's width first; sysfs (the pcie check) where NVML could not say
            pcie_width=gpu.pcie_link_width if gpu.pcie_link_width is not None else (link.width if link else None),
            pcie_width_max=gpu.pcie_link_width_max if gpu.pcie_link_width_max is not None
            else (link.expected_width if link else None),
            nvlink_errors=_nvlink_errors(gpu), ecc_correctable=gpu.ecc_volatile_sbe,
        ))
    return out


# --- robust statistics ----------------------------------------------------------------------


class Outlier(NamedTuple):
    key: Hashable
    value: float
    median: float
    mad: float
    z: float  # modified z-score in the "worse" direction; inf when every other value is identical


def robust_outliers(values: dict[K, float], worse: Literal["low", "high"], *, max_z: float,
                    min_gap: float) -> list[Outlier]:
    """Keys whose value is worse than the median by more than `max_z` modified z-scores AND by at
    least `min_gap`. With MAD 0 (most values identical) the gap alone decides. Pure."""
    if len(values) < 3:
        return []
    med = statistics.median(values.values())
    mad = statistics.median(abs(v - med) for v in values.values())
    found = []
    for key, value in values.items():
        gap = med - value if worse == "low" else value - med
        if gap <= 0 or gap < min_gap:
            continue
        z = MAD_TO_Z * gap / mad if mad > 0 else math.inf
        if z > max_z:
            found.append(Outlier(key, value, med, mad, z))
    return found


# --- what is compared -------------------------------------------------------------------------


class Metric(NamedTuple):
    name: str
    worse: Literal["low", "high"]
    value: Callable[[GpuTelemetry], float | None]
    busy_only: bool  # idle GPUs drop clocks and power by design: compare busy GPUs only
    show: Callable[[float], str]


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def _pct(x: float) -> str:
    return f"{x * 100:.0f}%"


METRICS: tuple[Metric, ...] = (
    Metric("sm_clock_ratio", "low", lambda g: _ratio(g.sm_clock_mhz, g.max_sm_clock_mhz), True,
           lambda x: f"SM clock {_pct(x)} of its maximum"),
    Metric("power_ratio", "low", lambda g: _ratio(g.power_w, g.power_limit_w), True,
           lambda x: f"power draw {_pct(x)} of its limit"),
    Metric("temperature_c", "high", lambda g: g.temperature_c, False, lambda x: f"{x:.0f} C"),
    Metric("nvlink_errors", "high", lambda g: g.nvlink_errors, False, lambda x: f"{x:.0f} NVLink errors"),
    Metric("ecc_correctable", "high", lambda g: g.ecc_correctable, False,
           lambda x: f"{x:.0f} corrected ECC errors since reset"),
)


class Signal(NamedTuple):
    cause: Cause  # what the node alarm says it is; the policy row for `straggler-*` decides
    what: str


# signal -> the cause a node alarm carries. One policy row per cause matches `straggler-*`.
SIGNALS: dict[str, Signal] = {
    "pcie_width": Signal(Cause.GPU_HARDWARE, "GPU PCIe link narrower than its slot"),
    "clock_throttle": Signal(Cause.GPU_HARDWARE, "hardware throttle reason active"),
    **{m.name: Signal(Cause.GPU_HARDWARE, f"{m.name} far from the fleet") for m in METRICS},
    "nic_pcie": Signal(Cause.NETWORK_FABRIC, "NIC PCIe link below what it can train at"),
    "driver_version": Signal(Cause.ENVIRONMENT, "driver version differs from the fleet"),
    "cuda_version": Signal(Cause.ENVIRONMENT, "CUDA version differs from the fleet"),
}


class Flag(BaseModel):
    node: str
    gpu: int | None = Field(default=None, description="GPU index; None for a node-level flag")
    signal: str = Field(description="a key of SIGNALS")
    hard: bool = Field(description="a fact that flags on its own, not a comparison")
    value: float | str | None = None
    fleet_median: float | str | None = None
    mad: float | None = None
    z: float | None = None
    why: str


class FleetStat(BaseModel):
    median: float
    mad: float
    n: int


class StragglerReport(BaseModel):
    flags: list[Flag] = Field(default_factory=list)
    fleet: dict[str, FleetStat] = Field(
        default_factory=dict, description="metric (`metric@model` when the fleet mixes GPU models) -> median, MAD, GPUs compared")
    majority: dict[str, str | None] = Field(default_factory=dict, description="driver/cuda -> the fleet's version")
    notes: list[str] = Field(default_factory=list)

    def by_node(self) -> dict[str, list[Flag]]:
        out: dict[str, list[Flag]] = {}
        for flag in self.flags:
            out.setdefault(flag.node, []).append(flag)
        return out

    def flagged_gpus(self) -> set[tuple[str, int]]:
        return {(f.node, f.gpu) for f in self.flags if f.gpu is not None}


def _hard_gpu_flags(g: GpuTelemetry) -> list[Flag]:
    flags = []
    if g.pcie_width is not None and g.pcie_width_max and 0 < g.pcie_width < g.pcie_width_max:
        flags.append(Flag(node=g.node, gpu=g.index, signal="pcie_width", hard=True, value=g.pcie_width,
                          fleet_median=None, why=f"{g.label}: PCIe x{g.pcie_width} of x{g.pcie_width_max}"))
    active = [r for r in HARD_THROTTLE if r in g.clock_event_reasons]
    if active:
        clock = (f"; SM clock {g.sm_clock_mhz} of {g.max_sm_clock_mhz} MHz"
                 if g.sm_clock_mhz is not None and g.max_sm_clock_mhz else "")
        temp = f", {g.temperature_c} C" if g.temperature_c is not None else ""
        power = (f", {g.power_w:g} of {g.power_limit_w:g} W" if g.power_w is not None and g.power_limit_w else "")
        flags.append(Flag(node=g.node, gpu=g.index, signal="clock_throttle", hard=True, value=",".join(active),
                          why=f"{g.label}: clocks held down by {', '.join(active)}{clock}{temp}{power}"))
    return flags


def _version_flags(nodes: list[NodeTelemetry], field: str, signal: str, share: float,
                   report: StragglerReport) -> None:
    held = {n.node: getattr(n, field) for n in nodes if getattr(n, field)}
    if not held:
        report.majority[signal] = None
        return
    version, count = Counter(held.values()).most_common(1)[0]
    if count <= share * len(held):
        report.majority[signal] = None
        spread = ", ".join(f"{v} x{c}" for v, c in Counter(held.values()).most_common())
        report.notes.append(f"no {signal.replace('_', ' ')} is held by most nodes ({spread}): not judged")
        return
    report.majority[signal] = version
    name = "driver" if signal == "driver_version" else "CUDA"
    for node, v in sorted(held.items()):
        if v != version:
            report.flags.append(Flag(node=node, signal=signal, hard=True, value=v, fleet_median=version,
                                     why=f"{name} {v}, the fleet runs {version} ({count} of {len(held)} nodes)"))


def _compare(report: StragglerReport, settings: StragglerSettings, metric: Metric, gpus: list[GpuTelemetry],
             stat_name: str) -> None:
    values = {(g.node, g.index): v for g in gpus
              if (v := metric.value(g)) is not None and not (metric.busy_only and g.idle)}
    if not values:
        return
    med = statistics.median(values.values())
    mad = statistics.median(abs(v - med) for v in values.values())
    report.fleet[stat_name] = FleetStat(median=med, mad=mad, n=len(values))
    if len(values) < settings.min_fleet:
        report.notes.append(f"{stat_name}: {len(values)} comparable GPU(s), fewer than "
                            f"{settings.min_fleet}: only hard facts are flagged")
        return
    gap = settings.min_gap.get(metric.name, 0.0)
    labels = {(g.node, g.index): g.label for g in gpus}
    for out in robust_outliers(values, metric.worse, max_z=settings.max_z, min_gap=gap):
        node, index = out.key
        label = labels[out.key]
        z = "MAD 0: most GPUs read the same" if math.isinf(out.z) else f"MAD {out.mad:.3g}, z {out.z:.1f}"
        report.flags.append(Flag(
            node=node, gpu=index, signal=metric.name, hard=False, value=round(out.value, 4),
            fleet_median=round(out.median, 4), mad=round(out.mad, 4), z=None if math.isinf(out.z) else round(out.z, 1),
            why=f"{label}: {metric.show(out.value)}, fleet median {metric.show(out.median)} ({z})"))


def find_stragglers(nodes: list[NodeTelemetry], settings: StragglerSettings) -> StragglerReport:
    """Every flag of one sweep, GPUs first, in node order. Pure."""
    report = StragglerReport()
    gpus = [g for n in sorted(nodes, key=lambda n: n.node) for g in n.gpus]
    for g in gpus:
        report.flags.extend(_hard_gpu_flags(g))
    # An H100 is compared with H100s: clocks, power and heat differ by model.
    models = sorted({g.model or "" for g in gpus})
    for metric in METRICS:
        for model in models:
            _compare(report, settings, metric, [g for g in gpus if (g.model or "") == model],
                     metric.name if len(models) == 1 else f"{metric.name}@{model or 'unknown model'}")
    for n in sorted(nodes, key=lambda n: n.node):
        for link in n.nic_links:
            want_w, want_s = link.expected_width, link.expected_speed_gts
            narrow = link.width is not None and want_w is not None and link.width < want_w
            slow = link.speed_gts is not None and want_s is not None and link.speed_gts < want_s
            if link.width == 0 or narrow or slow:
                report.flags.append(Flag(
                    node=n.node, signal="nic_pcie", hard=True, value=f"x{link.width} {link.speed_gts} GT/s",
                    fleet_median=f"x{want_w} {want_s} GT/s",
                    why=f"{link.label}: PCIe x{link.width} at {link.speed_gts:g} GT/s of x{want_w} at {want_s:g} GT/s"
                    if link.speed_gts and want_s else f"{link.label}: PCIe x{link.width} of x{want_w}"))
    _version_flags(nodes, "driver_version", "driver_version", settings.version_majority, report)
    _version_flags(nodes, "cuda_driver_version", "cuda_version", settings.version_majority, report)
    return report


def node_summary(flags: list[Flag], limit: int = 3) -> str:
    """One line for `pitstop nodes` and the alarm: the hard facts first."""
    ordered = sorted(flags, key=lambda f: (not f.hard, f.gpu if f.gpu is not None else -1))
    text = "; ".join(f.why for f in ordered[:limit])
    return text + (f" (+{len(ordered) - limit} more)" if len(ordered) > limit else "")


def alarm_cause(flags: list[Flag]) -> tuple[Cause, str]:
    """The (cause, signature) a node's straggler alarm carries: its first hard fact, else its first flag."""
    first = sorted(flags, key=lambda f: not f.hard)[0]
    return SIGNALS[first.signal].cause, f"straggler-{first.signal.replace('_', '-')}"
