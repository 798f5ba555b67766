"""Machine checks, EDAC counts and the CPU governor from sysfs/procfs trees
(fixtures: tests/fixtures/node/cpu_mem/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop.config import NodeCheckSettings, load_settings
from pitstop.models import CheckStatus
from pitstop.node import cpu_mem
from pitstop.node.check import CheckContext, run_checks
from pitstop.node.status import NodeParseError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "cpu_mem"
SETTINGS = NodeCheckSettings()


def result_for(name: str, settings: NodeCheckSettings = SETTINGS):
    snap = cpu_mem.read_snapshot(FIX / name / "sys", FIX / name / "proc")
    return snap, cpu_mem.process_cpu_mem(snap, settings)


def test_good_node() -> None:
    snap, result = result_for("good")
    assert [mc.name for mc in snap.controllers] == ["mc0", "mc1"] and snap.controllers[0].dimms[0].ce_count == 3
    assert snap.mce_exceptions == 0 and snap.governors == {"performance": 4}
    assert result.status is CheckStatus.OK
    assert result.summary == "2 memory controller(s), 3 correctable error(s), 0 machine checks, governor performance"


def test_degraded_node_warns_on_ce_mce_and_governor() -> None:
    _, result = result_for("degraded")
    assert result.status is CheckStatus.WARN
    found = [f["message"] for f in result.details["findings"]]
    assert found[0].startswith("mc1: 4711 correctable memory errors on CPU_SrcID#0_MC#1_Chan#0_DIMM#0")
    assert found[1].startswith("1 machine-check exception(s) since boot")
    assert found[2].startswith("CPU frequency governor is powersave on 2 of 4 CPU(s), want performance")
    relaxed = NodeCheckSettings(edac_ce_warn=10_000, mce_warn=5, cpu_governor=None)
    assert result_for("degraded", relaxed)[1].status is CheckStatus.OK


def test_uncorrectable_errors_fail_and_name_the_dimm() -> None:
    _, result = result_for("failed")
    assert result.status is CheckStatus.FAIL
    assert result.summary.startswith("mc0: 2 uncorrectable memory error(s) on CPU_SrcID#0_MC#0_Chan#1_DIMM#0")


def test_missing_files_are_unavailable(tmp_path: Path) -> None:
    result = cpu_mem.process_cpu_mem(cpu_mem.read_snapshot(tmp_path / "sys", tmp_path / "proc"), SETTINGS)
    assert result.status is CheckStatus.UNAVAILABLE
    partial = cpu_mem.read_snapshot(FIX / "good" / "sys", tmp_path / "proc")  # no /proc/interrupts
    assert cpu_mem.process_cpu_mem(partial, SETTINGS).summary.endswith("(mce not available)")


def test_corrupt_counter_is_noted_not_fatal(tmp_path: Path) -> None:
    mc = tmp_path / "sys" / "devices" / "system" / "edac" / "mc" / "mc0"
    mc.mkdir(parents=True)
    (mc / "ce_count").write_text("\x00\x07garbage")
    (mc / "ue_count").write_text("1\n")
    snap = cpu_mem.read_snapshot(tmp_path / "sys", tmp_path / "proc")
    assert snap.unreadable == ["mc0/ce_count"]
    assert cpu_mem.process_cpu_mem(snap, SETTINGS).status is CheckStatus.FAIL  # ue still counts


def test_interrupts_parser() -> None:
    totals = cpu_mem.parse_interrupts((FIX / "degraded" / "proc" / "interrupts").read_text())
    assert totals["MCE"] == 1 and totals["MCP"] == 4 * 318 and totals["ERR"] == 0
    with pytest.raises(NodeParseError):
        cpu_mem.parse_interrupts("not interrupts at all")
    # this machine's real /proc/interrupts parses (it may have no MCE row: not every CPU or VM does)
    real = Path("/proc/interrupts")
    if real.exists():
        assert isinstance(cpu_mem.parse_interrupts(real.read_text()), dict)


def test_check_uses_the_configured_roots() -> None:
    settings = load_settings(node_check={"sysfs_root": str(FIX / "failed" / "sys"), "procfs_root": str(FIX / "failed" / "proc")})
    report = run_checks(["cpu_mem"], CheckContext(settings))
    assert report.checks[0].status is CheckStatus.FAIL and report.overall is CheckStatus.FAIL


def test_runs_on_this_machine() -> None:
    report = run_checks(["cpu_mem"], CheckContext(load_settings()))
    assert report.checks[0].status in (CheckStatus.OK, CheckStatus.UNAVAILABLE), report.checks[0]
