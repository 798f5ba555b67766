"""Required systemd services (fixtures: tests/fixtures/node/services/README.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pitstop.config import NodeCheckSettings, load_settings
from pitstop.models import CheckStatus
from pitstop.node import services
from pitstop.node.check import CheckContext, run_checks
from pitstop.node.status import NodeParseError
from tests.node.tool_recordings import RecordedRunner

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "services"
UNITS = ["slurmd.service", "nvidia-persistenced.service", "nvidia-fabricmanager.service"]
SETTINGS = NodeCheckSettings()


def verdict(name: str, settings: NodeCheckSettings = SETTINGS):
    return services.process_services(services.parse_systemctl_show((FIX / name).read_text(), UNITS), settings)


def test_all_active_is_ok() -> None:
    result = verdict("show_good.txt")
    assert result.status is CheckStatus.OK
    assert result.summary == "active: slurmd, nvidia-persistenced, nvidia-fabricmanager"


def test_stopped_persistenced_warns_and_absent_fabric_manager_is_fine() -> None:
    result = verdict("show_degraded.txt")
    assert result.status is CheckStatus.WARN
    assert result.summary.startswith("nvidia-persistenced.service is inactive/dead: GPUs re-initialise")
    assert len(result.details["findings"]) == 1  # fabric manager is not installed: optional by default
    strict = NodeCheckSettings(optional_services=[])
    assert any("nvidia-fabricmanager.service is not installed" in f["message"]
               for f in verdict("show_degraded.txt", strict).details["findings"])


def test_failed_slurmd_or_fabric_manager_fails() -> None:
    result = verdict("show_failed.txt")
    assert result.status is CheckStatus.FAIL
    assert result.summary.startswith("slurmd.service is failed/failed: the node cannot run Slurm jobs; "
                                     "see `systemctl status slurmd.service`")
    assert "(+1 more)" in result.summary  # fabric manager too


def test_block_count_mismatch_is_an_error() -> None:
    with pytest.raises(NodeParseError, match="3 block"):
        services.parse_systemctl_show((FIX / "show_good.txt").read_text(), UNITS[:2])
    with pytest.raises(NodeParseError, match="KEY=value"):
        services.parse_systemctl_show("System has not been booted with systemd", UNITS[:1])


def test_check_asks_systemctl_for_all_units_at_once(tmp_path: Path) -> None:
    runner = RecordedRunner({("systemctl", "show"): FIX / "show_failed.txt"})
    result = services.check(CheckContext(load_settings(), runner=runner), run_dir=tmp_path)  # tmp_path: "systemd runs"
    assert result.status is CheckStatus.FAIL
    assert runner.calls == [["systemctl", "show", "--property=Id,LoadState,ActiveState,SubState", "--", *UNITS]]


def test_no_systemd_is_unavailable(tmp_path: Path) -> None:
    result = services.check(CheckContext(load_settings()), run_dir=tmp_path / "no-run-systemd")
    assert result.status is CheckStatus.UNAVAILABLE and "does not run systemd" in result.summary
    missing = load_settings(node_check={"systemctl_path": str(tmp_path / "no-systemctl")})
    assert services.check(CheckContext(missing), run_dir=tmp_path).status is CheckStatus.UNAVAILABLE


@pytest.mark.skipif(shutil.which("systemctl") is None, reason="no systemctl binary here")
def test_real_systemctl_without_systemd_as_init_is_unavailable(tmp_path: Path) -> None:
    """The real systemctl in a container answers "System has not been booted with systemd"."""
    if Path("/run/systemd/system").is_dir():
        pytest.skip("systemd is PID 1 here: covered by test_runs_on_this_machine")
    result = services.check(CheckContext(load_settings()), run_dir=tmp_path)  # pretend systemd runs
    assert result.status is CheckStatus.UNAVAILABLE and "systemctl show failed" in result.summary


def test_runs_on_this_machine() -> None:
    report = run_checks(["services"], CheckContext(load_settings()))
    assert report.checks[0].status in (CheckStatus.OK, CheckStatus.UNAVAILABLE), report.checks[0]
