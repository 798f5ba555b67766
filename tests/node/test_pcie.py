"""The pcie check on real-layout sysfs trees (tests/fixtures/node/pcie/README.md says where each
format comes from), and on this machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop.config import NodeCheckSettings
from pitstop.models import CheckStatus
from pitstop.node.pcie import check_pcie, device_kind, parse_speed, parse_width, read_links

TREES = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "pcie"


def run(tree: str, **settings):
    return check_pcie(NodeCheckSettings(**settings), TREES / tree / "bus" / "pci" / "devices")


@pytest.mark.parametrize("text, expected", [
    ("32.0 GT/s PCIe\n", 32.0), ("2.5 GT/s PCIe", 2.5), ("8 GT/s", 8.0),  # older kernels: no suffix
    ("Unknown", None), ("Unknown speed", None), ("", None), (None, None), ("fast", None),
])
def test_speed_strings_as_the_kernel_prints_them(text, expected):
    assert parse_speed(text) == expected


def test_width_rejects_garbage():
    assert parse_width("16\n") == 16 and parse_width("0") == 0
    assert parse_width("x16") is None and parse_width("9" * 50) is None and parse_width(None) is None


def test_device_classes():
    assert device_kind("0x10de", "0x030200") == "gpu"  # H100 SXM: 3D controller
    assert device_kind("0x10de", "0x030000") == "gpu"  # VGA-class GPU
    assert device_kind("0x10de", "0x068000") is None   # NVSwitch
    assert device_kind("0x10de", "0x040300") is None   # a GPU's HDMI audio function
    assert device_kind("0x15b3", "0x020700") == "nic"  # ConnectX InfiniBand
    assert device_kind("0x8086", "0x020000") == "nic"  # any Ethernet controller
    assert device_kind("0x1000", "0x060400") is None   # PCIe switch port


def test_healthy_board_is_ok_idle_gpu_and_gen4_slot_included():
    result = run("healthy")
    assert result.status is CheckStatus.OK, result.summary
    assert result.summary == "2 GPU and 1 NIC link(s) at full width"
    links = {lk["address"]: lk for lk in result.details["links"]}
    assert set(links) == {"0000:1b:00.0", "0000:1c:00.0", "0000:1d:00.0"}  # no VF, no NVSwitch
    assert links["0000:1d:00.0"]["expected_speed_gts"] == 16.0  # the slot's Gen4, not the card's Gen5


def test_idle_gpu_speed_is_judged_only_when_asked():
    result = run("healthy", pcie_judge_gpu_speed=True)
    assert result.status is CheckStatus.WARN
    assert result.summary.startswith("GPU 0000:1c:00.0: PCIe link at Gen1 of Gen5")


def test_gpu_at_x8_warns_with_the_lanes():
    result = run("gpu_x8")
    assert result.status is CheckStatus.WARN
    assert result.summary.startswith("GPU 0000:1c:00.0: PCIe link x8 of x16 (50% of its bandwidth)")


def test_slow_nic_warns():
    result = run("nic_slow")
    assert result.status is CheckStatus.WARN
    assert "NIC 0000:1d:00.0: PCIe link at Gen3 of Gen5" in result.summary


def test_link_down_fails():
    result = run("link_down")
    assert result.status is CheckStatus.FAIL
    assert "GPU 0000:1c:00.0: PCIe link is down (0 lanes of x16)" in result.summary


def test_virtual_machine_and_missing_root_are_unavailable(tmp_path):
    vm = run("virtual")
    assert vm.status is CheckStatus.UNAVAILABLE and "without PCIe link attributes" in vm.summary
    gone = check_pcie(NodeCheckSettings(), tmp_path / "no-such-sysfs")
    assert gone.status is CheckStatus.UNAVAILABLE and "no NVIDIA GPU or NIC" in gone.summary


def test_unreadable_attributes_degrade_not_crash(tmp_path):
    dev = tmp_path / "0000:3b:00.0"
    dev.mkdir()
    (dev / "vendor").write_text("0x10de\n")
    (dev / "class").write_text("0x030200\n")
    (dev / "current_link_width").mkdir()  # reading a directory fails like EINVAL from a dead link
    (dev / "current_link_speed").write_bytes(b"\xff\xfe\x00garbage" * 1000)
    [link] = read_links(tmp_path)
    assert link.width is None and link.speed_gts is None
    assert check_pcie(NodeCheckSettings(), tmp_path).status is CheckStatus.UNAVAILABLE


def test_this_machine_answers_ok_or_unavailable():
    result = check_pcie(NodeCheckSettings())
    assert result.status in {CheckStatus.OK, CheckStatus.UNAVAILABLE, CheckStatus.WARN}, result.summary
