"""Silent stragglers from one sweep's node-check reports (pitstop/node/stragglers.py).

The reports are made the way a node makes them: NVML through `snapshot` + `evaluate` over a fake
NVML module (the GPU is the only thing faked), PCIe through the pcie check on a sysfs tree.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pynvml
import pytest

from pitstop.config import NodeCheckSettings, StragglerSettings
from pitstop.models import CheckResult, CheckStatus, NodeCheckReport
from pitstop.node import nvml
from pitstop.node.pcie import check_pcie
from pitstop.node.stragglers import (
    alarm_cause,
    find_stragglers,
    node_summary,
    robust_outliers,
    telemetry_from_report,
)
from tests.node.fake_nvml import FakeGpu, FakeNvml

PCIE_TREES = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "pcie"


@dataclass
class BusyGpu(FakeGpu):
    """An H100 SXM under load, with what the straggler check also reads."""

    max_sm_clock: int = 1980
    power_limit_mw: int = 700_000
    pcie_width: int = 16
    pcie_width_max: int = 16
    pcie_gen: int = 5
    clock_reasons: int = 0


class TelemetryNvml(FakeNvml):
    def __init__(self, gpus, cuda: int = 12040, **kw) -> None:
        super().__init__(gpus, **kw)
        self.cuda = cuda

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        assert clock == pynvml.NVML_CLOCK_SM
        return h.max_sm_clock

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return h.power_limit_mw

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return h.pcie_width

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return h.pcie_width_max

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return h.pcie_gen

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5


def busy(rng: random.Random, index: int, **over) -> BusyGpu:
    fields = dict(bus_id=f"00000000:{0x18 + index:02X}:00.0", temperature=rng.randint(58, 66),
                  power_mw=int(rng.uniform(610, 665) * 1000), sm_clock=rng.choice((1965, 1980)))
    fields.update(over)
    return BusyGpu(**fields)


def report(node: str, gpus: list[FakeGpu], *, driver: str = "550.54.15", cuda: int = 12040,
           pcie: CheckResult | None = None) -> NodeCheckReport:
    result = nvml.evaluate(nvml.snapshot(TelemetryNvml(gpus, cuda=cuda, driver=driver)), NodeCheckSettings())
    checks = [result] + ([pcie] if pcie else [])
    return NodeCheckReport(node=node, checked_at="2026-12-03T17:00:00+00:00", overall=CheckStatus.OK, checks=checks)


def fleet(n_nodes: int = 12, seed: int = 1, special: dict | None = None, per_node: dict | None = None) -> list:
    """`special`: (node index, gpu index) -> BusyGpu field overrides."""
    rng = random.Random(seed)
    special = special or {}
    out = []
    for n in range(n_nodes):
        gpus = [busy(rng, i, **special.get((n, i), {})) for i in range(8)]
        out.append(telemetry_from_report(report(f"gpu{n + 1:02d}", gpus, **(per_node or {}).get(n, {}))))
    return out


def test_nvml_snapshot_reads_what_the_straggler_check_needs():
    snap = nvml.snapshot(TelemetryNvml([BusyGpu(pcie_width=8, power_mw=650_500)], cuda=12040))
    [gpu] = snap.gpus
    assert snap.cuda_driver_version == "12.4"
    assert (gpu.max_sm_clock_mhz, gpu.power_w, gpu.power_limit_w) == (1980, 650.5, 700.0)
    assert (gpu.pcie_link_width, gpu.pcie_link_width_max, gpu.pcie_link_gen, gpu.pcie_link_gen_max) == (8, 16, 5, 5)
    # an older driver without these calls: the fields stay None, nothing is recorded as an error
    old = nvml.snapshot(FakeNvml([FakeGpu()]))
    assert old.cuda_driver_version is None and old.gpus[0].max_sm_clock_mhz is None and not old.gpus[0].errors


def test_a_healthy_fleet_flags_nothing():
    result = find_stragglers(fleet(), StragglerSettings())
    assert result.flags == [], [f.why for f in result.flags]
    assert result.fleet["sm_clock_ratio"].n == 96 and result.majority == {"driver_version": "550.54.15", "cuda_version": "12.4"}


def test_x8_link_and_hardware_slowdown_flag_on_their_own():
    nodes = fleet(special={(2, 3): {"pcie_width": 8}, (6, 5): {"clock_reasons": 0x008}})  # 0x008: HwSlowdown
    result = find_stragglers(nodes, StragglerSettings())
    assert result.flagged_gpus() == {("gpu03", 3), ("gpu07", 5)}
    by_node = result.by_node()
    [x8] = by_node["gpu03"]
    assert x8.hard and x8.signal == "pcie_width" and x8.why == "GPU 3 (00000000:1B:00.0): PCIe x8 of x16"
    [slow] = by_node["gpu07"]
    assert slow.signal == "clock_throttle" and "hw_slowdown" in slow.why and "of 700 W" in slow.why
    assert alarm_cause(by_node["gpu03"])[1] == "straggler-pcie-width"


def test_power_capped_gpu_far_below_the_fleet_clock_is_flagged_with_the_median():
    # sw_power_cap alone is normal under load; 1350 of 1980 MHz while the fleet runs ~1980 is not
    nodes = fleet(special={(4, 1): {"clock_reasons": 0x004, "sm_clock": 1350}})
    result = find_stragglers(nodes, StragglerSettings())
    [flag] = result.flags
    assert (flag.node, flag.gpu, flag.signal, flag.hard) == ("gpu05", 1, "sm_clock_ratio", False)
    assert flag.fleet_median == round(1965 / 1980, 4) and flag.value == round(1350 / 1980, 4)
    assert "SM clock 68% of its maximum, fleet median SM clock 99% of its maximum (MAD 0" in flag.why


def test_idle_gpus_are_not_compared_with_busy_ones():
    idle = {(n, i): {"clock_reasons": 0x001, "sm_clock": 345, "power_mw": 71_000} for n in range(5) for i in range(8)}
    result = find_stragglers(fleet(special=idle), StragglerSettings())
    assert result.flags == [] and result.fleet["sm_clock_ratio"].n == 56


def test_zero_spread_uses_the_minimum_gap():
    values = {k: 60.0 for k in range(20)} | {"hot": 75.0, "warm": 65.0}
    found = robust_outliers(values, "high", max_z=3.5, min_gap=8.0)
    assert [o.key for o in found] == ["hot"] and found[0].mad == 0 and found[0].z == float("inf")
    assert robust_outliers({1: 1.0, 2: 9.0}, "high", max_z=3.5, min_gap=0) == []  # two values: no median to speak of


def test_counters_need_a_real_excess_over_the_fleet():
    noisy = {(3, 2): {"ecc": {(pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC): 40}},
             (5, 0): {"ecc": {(pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC): 5_000}},
             (8, 7): {"nvlink_errors": {(0, pynvml.NVML_NVLINK_ERROR_DL_REPLAY): 900,
                                        (1, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT): 300}}}
    result = find_stragglers(fleet(special=noisy), StragglerSettings())
    assert {(f.node, f.gpu, f.signal) for f in result.flags} == {("gpu06", 0, "ecc_correctable"),
                                                                 ("gpu09", 7, "nvlink_errors")}
    assert "1200 NVLink errors" in next(f.why for f in result.flags if f.signal == "nvlink_errors")


def test_small_fleet_judges_hard_facts_only():
    rng = random.Random(2)
    nodes = [telemetry_from_report(report("a", [busy(rng, 0, sm_clock=900)])),
             telemetry_from_report(report("b", [busy(rng, 0, pcie_width=4)])),
             telemetry_from_report(report("c", [busy(rng, 0)]))]
    result = find_stragglers(nodes, StragglerSettings())
    assert [(f.node, f.signal) for f in result.flags] == [("b", "pcie_width")]
    assert any("fewer than 8: only hard facts" in n for n in result.notes)


def test_driver_and_cuda_versions_against_the_fleet_majority():
    kw = {3: {"driver": "535.129.03", "cuda": 12020}}
    result = find_stragglers(fleet(n_nodes=10, per_node=kw), StragglerSettings())
    flags = {(f.node, f.signal): f for f in result.flags}
    assert set(flags) == {("gpu04", "driver_version"), ("gpu04", "cuda_version")}
    assert flags[("gpu04", "driver_version")].why == "driver 535.129.03, the fleet runs 550.54.15 (9 of 10 nodes)"
    assert alarm_cause(list(flags.values()))[0].value == "environment"
    tie = find_stragglers(fleet(n_nodes=4, per_node={0: {"driver": "535.129.03"}, 1: {"driver": "535.129.03"}}),
                          StragglerSettings())
    assert not [f for f in tie.flags if f.signal == "driver_version"]
    assert any("no driver version is held by most nodes" in n for n in tie.notes)


def test_gpu_width_from_sysfs_when_nvml_cannot_say_and_nic_links():
    class NoPcieNvml(TelemetryNvml):
        nvmlDeviceGetCurrPcieLinkWidth = None  # older driver: the call is missing
        nvmlDeviceGetMaxPcieLinkWidth = None

    tree = PCIE_TREES / "gpu_x8" / "bus" / "pci" / "devices"
    pcie = check_pcie(NodeCheckSettings(), tree)
    gpus = [BusyGpu(bus_id="00000000:1B:00.0"), BusyGpu(bus_id="00000000:1C:00.0")]
    snap = nvml.snapshot(NoPcieNvml(gpus))
    rep = NodeCheckReport(node="n1", checked_at="x", overall=CheckStatus.WARN,
                          checks=[nvml.evaluate(snap, NodeCheckSettings()), pcie])
    tele = telemetry_from_report(rep)
    assert [(g.pcie_width, g.pcie_width_max) for g in tele.gpus] == [(16, 16), (8, 16)]
    slow_nic = check_pcie(NodeCheckSettings(), PCIE_TREES / "nic_slow" / "bus" / "pci" / "devices")
    rep2 = NodeCheckReport(node="n2", checked_at="x", overall=CheckStatus.WARN, checks=[slow_nic])
    result = find_stragglers([tele, telemetry_from_report(rep2)], StragglerSettings())
    assert [(f.node, f.gpu, f.signal) for f in result.flags] == [("n1", 1, "pcie_width"), ("n2", None, "nic_pcie")]
    assert "NIC 0000:1d:00.0: PCIe x16 at 8 GT/s of x16 at 32 GT/s" in node_summary(result.by_node()["n2"])


@pytest.mark.parametrize("checks", [
    [],
    [CheckResult(name="nvml", status=CheckStatus.UNAVAILABLE, summary="NVML unavailable")],
    [CheckResult(name="nvml", status=CheckStatus.OK, summary="?", details={"gpus": [{"index": "x"}, 7, None]})],
    [CheckResult(name="pcie", status=CheckStatus.OK, summary="?", details={"links": "not a list"})],
])
def test_reports_without_telemetry_give_empty_telemetry(checks):
    rep = NodeCheckReport(node="n", checked_at="x", overall=CheckStatus.OK, checks=checks)
    tele = telemetry_from_report(rep)
    assert tele.gpus == [] and tele.nic_links == []
    assert find_stragglers([tele], StragglerSettings()).flags == []


def test_gpu_models_are_compared_with_their_own_kind():
    # two A100 nodes in an H100 fleet: lower power limit use and clocks are the A100's, not a fault
    rng = random.Random(5)
    nodes = fleet()
    for n in range(2):
        a100 = [busy(rng, i, name="NVIDIA A100-SXM4-80GB", max_sm_clock=1410, sm_clock=1410,
                     power_limit_mw=400_000, power_mw=int(rng.uniform(240, 260) * 1000)) for i in range(8)]
        nodes.append(telemetry_from_report(report(f"a100-{n}", a100)))
    result = find_stragglers(nodes, StragglerSettings())
    assert result.flags == [], [f.why for f in result.flags]
    assert result.fleet["power_ratio@NVIDIA A100-SXM4-80GB"].n == 16
    assert result.fleet["power_ratio@NVIDIA H100 80GB HBM3"].n == 96
