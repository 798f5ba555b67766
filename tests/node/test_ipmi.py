"""BMC sensors and SEL via ipmitool (fixtures: tests/fixtures/node/ipmi/README.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from pitstop.config import NodeCheckSettings, load_settings
from pitstop.models import CheckStatus
from pitstop.node import ipmi
from pitstop.node.check import CheckContext, run_checks
from pitstop.node.status import NodeParseError
from pitstop.node.tool import ToolOutput
from tests.node.tool_recordings import RecordedRunner, timed_out

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "ipmi"
NOW = datetime(2026, 11, 20, 4, 0, tzinfo=UTC)  # the failed SEL's events are from the last 5 hours
SETTINGS = NodeCheckSettings()


def text(name: str) -> str:
    return (FIX / name).read_text()


def messages(result) -> list[str]:
    return [f["message"] for f in result.details["findings"]]


def test_healthy_bmc_is_ok_and_old_sel_events_are_history() -> None:
    result = ipmi.process_ipmi(text("sdr_elist_good.txt"), text("sel_elist_good.txt"), NOW, SETTINGS)
    assert result.status is CheckStatus.OK, result.summary
    assert result.details["sensors"] == 16 and result.details["sel_entries"] == 7
    assert "16 BMC sensor(s) ok" in result.summary  # the June PSU AC loss is outside the 24 h window


def test_degraded_sensors_warn() -> None:
    result = ipmi.process_ipmi(text("sdr_elist_degraded.txt"), text("sel_elist_empty.txt"), NOW, SETTINGS)
    assert result.status is CheckStatus.WARN
    assert "temperature Inlet Temp is unc (41 degrees C)" in messages(result)
    assert "PS2 Status: Predictive failure" in messages(result)


def test_failed_psu_fan_and_temperature_fail() -> None:
    result = ipmi.process_ipmi(text("sdr_elist_failed.txt"), None, NOW, SETTINGS)
    assert result.status is CheckStatus.FAIL
    found = messages(result)
    assert "temperature Temp is ucr (97 degrees C)" in found
    assert "fan Fan3A is lcr (0 RPM)" in found
    assert "PS2 Status: Failure detected" in found and "PS2 Status: Power Supply AC lost" in found
    assert "PS Redundancy: Redundancy Lost" in found


def test_sdr_list_layout() -> None:
    sensors = ipmi.parse_sdr(text("sdr_list_failed.txt"))
    assert [(s.name, s.status, s.category) for s in sensors if s.status != "ok"] == [
        ("Temp", "cr", "temperature"), ("Fan3A", "cr", "fan"), ("Fan7A", "ns", "fan")]
    assert ipmi.process_ipmi(text("sdr_list_failed.txt"), None, NOW, SETTINGS).status is CheckStatus.FAIL


def test_recent_sel_events_warn_with_evidence() -> None:
    result = ipmi.process_ipmi(text("sdr_elist_good.txt"), text("sel_elist_failed.txt"), NOW, SETTINGS)
    assert result.status is CheckStatus.WARN  # history: the sensors say the node is fine now
    assert messages(result) == [
        "SEL 2026-11-19 23:58: PSU lost AC input (Power Supply PS2 Status: Power Supply AC lost)",
        "SEL 2026-11-19 23:58: PSU failure (Power Supply PS2 Status: Failure detected)",
        "SEL 2026-11-19 23:58: redundancy lost (Power Supply PS Redundancy: Redundancy Lost)",
        "SEL 2026-11-20 02:58: fan below critical speed (Fan FAN3: Lower Critical going low)",
        "SEL 2026-11-20 03:12: over-temperature (Temperature CPU2 Temp: Upper Critical going high)",
    ]
    later = datetime(2026, 11, 22, tzinfo=UTC)
    assert ipmi.process_ipmi(text("sdr_elist_good.txt"), text("sel_elist_failed.txt"), later, SETTINGS).status \
        is CheckStatus.OK


def test_sel_formats() -> None:
    [up, down] = ipmi.parse_sel(text("sel_elist_1819_format.txt"))  # ipmitool 1.8.19: %x %X %Z
    assert up.when == datetime(2026, 11, 20, 3, 12, 9, tzinfo=UTC) and up.asserted and not down.asserted
    assert "Threshold 95 degrees C" in up.extra
    pre_init = [e for e in ipmi.parse_sel(text("sel_elist_good.txt")) if e.record == "6"]
    assert pre_init[0].when is None  # before the BMC clock was set: never "recent"
    assert ipmi.parse_sel(text("sel_elist_empty.txt")) == []


@pytest.mark.parametrize("bad", ["garbage\nmore garbage", "Temp | 0Eh | weird | 3.1 | 97 degrees C"])
def test_garbage_sdr_is_a_clear_error(bad: str) -> None:
    with pytest.raises(NodeParseError, match="ipmitool sdr"):
        ipmi.parse_sdr(bad)
    result = ipmi.process_ipmi(bad, None, NOW, SETTINGS)
    assert result.status is CheckStatus.WARN and "ipmitool sdr" in result.summary


def test_check_runs_both_commands() -> None:
    runner = RecordedRunner({("ipmitool", "sdr", "elist"): FIX / "sdr_elist_failed.txt",
                             ("ipmitool", "sel", "elist"): FIX / "sel_elist_failed.txt"})
    result = ipmi.check(CheckContext(load_settings(), runner=runner))
    assert result.status is CheckStatus.FAIL and runner.calls == [["ipmitool", "sdr", "elist"], ["ipmitool", "sel", "elist"]]


def test_no_bmc_driver_is_unavailable_and_skips_the_sel() -> None:
    no_device = ToolOutput(argv=["ipmitool"], returncode=1, stdout="",
                           stderr="Could not open device at /dev/ipmi0 or /dev/ipmi/0 or /dev/ipmidev/0: No such file or directory\n")
    runner = RecordedRunner({("ipmitool",): no_device})
    result = ipmi.check(CheckContext(load_settings(), runner=runner))
    assert result.status is CheckStatus.UNAVAILABLE and "Could not open device" in result.summary
    assert len(runner.calls) == 1


def test_slow_sel_keeps_the_sensor_verdict() -> None:
    runner = RecordedRunner({("ipmitool", "sdr"): FIX / "sdr_elist_degraded.txt", ("ipmitool", "sel"): timed_out("ipmitool sel elist", 30)})
    result = ipmi.check(CheckContext(load_settings(), runner=runner))
    assert result.status is CheckStatus.WARN and "did not answer within 30 s" in result.details["unavailable"]


def test_tool_missing_is_unavailable(tmp_path: Path) -> None:
    settings = load_settings(node_check={"ipmitool_path": str(tmp_path / "no-ipmitool")})
    result = ipmi.check(CheckContext(settings))  # the real runner
    assert result.status is CheckStatus.UNAVAILABLE and "not installed" in result.summary


def test_runs_on_this_machine() -> None:
    report = run_checks(["ipmi"], CheckContext(load_settings()))
    assert report.checks[0].status in (CheckStatus.OK, CheckStatus.UNAVAILABLE), report.checks[0]
