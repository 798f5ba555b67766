"""NVMe SMART health: nvme-cli and smartctl JSON (fixtures: tests/fixtures/node/nvme/README.md)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pitstop.config import NodeCheckSettings, load_settings
from pitstop.models import CheckStatus
from pitstop.node import nvme
from pitstop.node.check import CheckContext, run_checks
from pitstop.node.status import NodeParseError
from pitstop.node.tool import ToolOutput, ToolUnavailable
from tests.node.tool_recordings import RecordedRunner, missing, timed_out

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "nvme"
SETTINGS = NodeCheckSettings()


def verdict(drive: nvme.NvmeHealth) -> CheckStatus:
    return nvme.process_nvme([drive], [], SETTINGS).status


def fake_sysfs(root: Path, *controllers: tuple[str, str]) -> Path:
    for name, state in controllers:
        d = root / "class" / "nvme" / name
        d.mkdir(parents=True)
        (d / "state").write_text(f"{state}\n")
        (d / "model").write_text("SAMSUNG MZQL23T8HCLS-00A07               \n")
        (d / "serial").write_text("S64HNE0T512345      \n")
    return root


def test_nvme_cli_good_drive_is_ok() -> None:
    drive = nvme.parse_nvme_cli((FIX / "nvme_cli_good.json").read_text(), "/dev/nvme0")
    assert (drive.critical_warning, drive.temperature_c, drive.percentage_used, drive.media_errors) == (0, 37, 2, 0)
    result = nvme.process_nvme([drive], [], SETTINGS)
    assert result.status is CheckStatus.OK and "1 NVMe drive(s) healthy (max 2% life used)" == result.summary


def test_nvme_cli_verbose_layout_and_degraded_drive_warns() -> None:
    drive = nvme.parse_nvme_cli((FIX / "nvme_cli_verbose_degraded.json").read_text(), "/dev/nvme1")
    assert drive.critical_warning == 1 and drive.percentage_used == 93  # critical_warning is an object here
    result = nvme.process_nvme([drive], [], SETTINGS)
    assert result.status is CheckStatus.WARN
    messages = [f["message"] for f in result.details["findings"]]
    assert any("available spare below threshold" in m for m in messages)
    assert any("93% of rated life used" in m for m in messages)


def test_nvme_cli_failed_drive_fails_on_read_only_and_degraded_reliability() -> None:
    drive = nvme.parse_nvme_cli((FIX / "nvme_cli_failed.json").read_text(), "/dev/nvme0")
    assert drive.critical_warning == 0x0C and drive.media_errors == 1187
    result = nvme.process_nvme([drive], [], SETTINGS)
    assert result.status is CheckStatus.FAIL
    assert "reliability degraded" in result.summary
    assert any("read-only" in f["message"] and f["status"] == "FAIL" for f in result.details["findings"])
    # media errors alone only WARN by default; a fail threshold makes them FAIL
    only_media = drive.model_copy(update={"critical_warning": 0, "percentage_used": 10})
    assert verdict(only_media) is CheckStatus.WARN
    strict = NodeCheckSettings(nvme_media_errors_fail=100)
    assert nvme.process_nvme([only_media], [], strict).status is CheckStatus.FAIL


def test_smartctl_layouts() -> None:
    good = nvme.parse_smartctl((FIX / "smartctl_good.json").read_text(), "/dev/nvme0")
    assert (good.source, good.temperature_c, good.available_spare) == ("smartctl", 37, 100)
    assert verdict(good) is CheckStatus.OK
    failed = nvme.parse_smartctl((FIX / "smartctl_failed.json").read_text(), "/dev/nvme0")
    assert failed.critical_warning == 4 and failed.media_errors == 57 and verdict(failed) is CheckStatus.FAIL
    with pytest.raises(ToolUnavailable, match="Permission denied"):  # not root: no verdict on the drive
        nvme.parse_smartctl((FIX / "smartctl_open_failed.json").read_text(), "/dev/nvme0")


@pytest.mark.parametrize("text", ["", "nvme: command not found", '{"critical_warning": 0, "temp', "[1, 2]",
                                  '{"temperature": 300}', '{"critical_warning": "lots"}', "{" * 100_000])
def test_bad_nvme_cli_output_is_a_clear_parse_error(text: str) -> None:
    with pytest.raises(NodeParseError, match="nvme smart-log|critical_warning"):
        nvme.parse_nvme_cli(text, "/dev/nvme0")


def test_unknown_critical_bits_and_controller_state() -> None:
    drive = nvme.NvmeHealth(device="/dev/nvme0", source="nvme-cli", critical_warning=0x80, state="resetting")
    messages = [m for _, m in nvme.drive_findings(drive, SETTINGS)]
    assert any("unknown critical warning bits 0x80" in m for m in messages)
    assert any("controller state resetting" in m for m in messages)


def test_check_prefers_nvme_cli_and_falls_back_to_smartctl(tmp_path: Path) -> None:
    settings = load_settings(node_check={"sysfs_root": str(fake_sysfs(tmp_path, ("nvme0", "live"), ("nvme1", "live")))})
    runner = RecordedRunner({
        ("nvme", "smart-log", "/dev/nvme0"): FIX / "nvme_cli_good.json",
        ("nvme", "smart-log", "/dev/nvme1"): ToolOutput(argv=["nvme"], returncode=1, stdout="", stderr="smart log: Permission denied"),
        ("smartctl", "-j", "-H", "-A", "/dev/nvme1"): FIX / "smartctl_failed.json",
    })
    result = nvme.check(CheckContext(settings, runner=runner))
    assert result.status is CheckStatus.FAIL
    assert [d["source"] for d in result.details["drives"]] == ["nvme-cli", "smartctl"]
    assert result.details["drives"][0]["model"].startswith("SAMSUNG")
    assert ["nvme", "smart-log", "/dev/nvme0", "-o", "json"] in runner.calls


def test_tool_missing_is_unavailable_but_a_dead_controller_still_fails(tmp_path: Path) -> None:
    settings = load_settings(node_check={"sysfs_root": str(fake_sysfs(tmp_path, ("nvme0", "live"))),
                                         "nvme_path": str(tmp_path / "no-nvme"), "smartctl_path": str(tmp_path / "no-smartctl")})
    result = nvme.check(CheckContext(settings))  # the real runner: neither tool exists
    assert result.status is CheckStatus.UNAVAILABLE and "not installed" in result.summary
    dead = load_settings(node_check={"sysfs_root": str(fake_sysfs(tmp_path / "d", ("nvme0", "dead"))),
                                     "nvme_path": str(tmp_path / "no-nvme"), "smartctl_path": str(tmp_path / "no-smartctl")})
    result = nvme.check(CheckContext(dead))
    assert result.status is CheckStatus.FAIL and "controller state dead" in result.summary


def test_a_hung_controller_warns(tmp_path: Path) -> None:
    settings = load_settings(node_check={"sysfs_root": str(fake_sysfs(tmp_path, ("nvme0", "live")))})
    result = nvme.check(CheckContext(settings, runner=RecordedRunner({("nvme",): timed_out("nvme smart-log"),
                                                                       ("smartctl",): missing("smartctl")})))
    assert result.status is CheckStatus.WARN and "controller hung" in result.summary


def test_the_real_runner_reads_a_tool_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The subprocess path end to end: an `nvme` on PATH that prints a recorded smart-log."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "nvme"
    script.write_text(f'#!/bin/sh\n[ "$1 $2 $3 $4" = "smart-log /dev/nvme0 -o json" ] || exit 22\n'
                      f'cat {FIX / "nvme_cli_verbose_degraded.json"}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    settings = load_settings(node_check={"sysfs_root": str(fake_sysfs(tmp_path / "sys", ("nvme0", "live")))})
    result = nvme.check(CheckContext(settings))
    assert result.status is CheckStatus.WARN and result.details["drives"][0]["percentage_used"] == 93


def test_no_controllers_is_unavailable(tmp_path: Path) -> None:
    result = nvme.check(CheckContext(load_settings(node_check={"sysfs_root": str(tmp_path)})))
    assert result.status is CheckStatus.UNAVAILABLE and "no NVMe controllers" in result.summary


def test_runs_on_this_machine() -> None:
    report = run_checks(["nvme"], CheckContext(load_settings()))
    assert report.checks[0].status in (CheckStatus.OK, CheckStatus.UNAVAILABLE), report.checks[0]


def test_hung_controllers_share_one_time_budget(tmp_path: Path) -> None:
    """Each hung drive costs its whole timeout; the check as a whole stays within 2 x tool_timeout_s."""
    import time

    from pitstop.node.tool import ToolTimedOut

    def hanging(argv: list[str], timeout_s: float) -> ToolOutput:
        time.sleep(timeout_s)
        raise ToolTimedOut(f"{argv[0]} did not answer within {timeout_s:g} s")

    sysfs = fake_sysfs(tmp_path, *((f"nvme{i}", "live") for i in range(5)))
    settings = load_settings(node_check={"sysfs_root": str(sysfs), "tool_timeout_s": 0.2})
    started = time.monotonic()
    result = nvme.check(CheckContext(settings, runner=hanging))
    assert time.monotonic() - started < 0.2 * 2 + 0.3
    assert result.status is CheckStatus.WARN
    assert sum("ran out of time" in m for m in result.details["problems"]) >= 3
