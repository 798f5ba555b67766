"""`pitstop node-check` end to end: a real process, real settings from the environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pitstop.config import NodeCheckSettings, TriggerSettings, load_settings
from pitstop.models import CheckResult, CheckStatus, NodeCheckReport
from pitstop.node import registry
from pitstop.node.check import CHECKS, CheckContext, CheckSpec, UnknownCheck, load, parse_check_names, run_checks
from tests.conftest import REPO_ROOT
from tests.node.test_infiniband import make_port

PITSTOP = [sys.executable, "-c", "from pitstop.cli.entry import main; main()"]


def run_cli(args: list[str], env_extra: dict[str, str]) -> subprocess.CompletedProcess:
    env = {**os.environ, **env_extra}
    return subprocess.run([*PITSTOP, "node-check", *args], capture_output=True, text=True, env=env,
                          cwd=REPO_ROOT, timeout=60, check=False)


def test_json_report_and_exit_code_follow_the_verdict(tmp_path: Path) -> None:
    make_port(tmp_path / "ib", "mlx5_0", 1, {"state": "1: DOWN", "phys_state": "3: Disabled"})
    env = {"PITSTOP_NODE_CHECK__IB_SYSFS_ROOT": str(tmp_path / "ib"), "SLURMD_NODENAME": "gpu07"}
    proc = run_cli(["--json", "--checks", "ib,disk,nvml"], env)
    report = NodeCheckReport.model_validate_json(proc.stdout)
    assert report.node == "gpu07" and [c.name for c in report.checks] == ["ib", "disk", "nvml"]
    assert report.overall is CheckStatus.FAIL and proc.returncode == 2 == report.exit_code
    assert report.checks[0].summary.startswith("mlx5_0 port 1 is DOWN")


def test_healthy_node_exits_0_and_unavailable_does_not_fail(tmp_path: Path) -> None:
    make_port(tmp_path / "ib", "mlx5_0", 1)
    proc = run_cli(["--json", "--checks", "ib,nvml,dcgm"], {
        "PITSTOP_NODE_CHECK__IB_SYSFS_ROOT": str(tmp_path / "ib"),
        "PITSTOP_NODE_CHECK__DCGMI_PATH": str(tmp_path / "no-dcgmi"),
    })
    report = json.loads(proc.stdout)
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses["ib"] == "OK" and statuses["dcgm"] == "UNAVAILABLE"
    assert report["overall"] == "OK" and proc.returncode == 0


def test_warn_exits_1_and_human_output_is_a_table(tmp_path: Path) -> None:
    make_port(tmp_path / "ib", "mlx5_0", 1, counters={"link_downed": 3})
    proc = run_cli(["--checks", "ib"], {"PITSTOP_NODE_CHECK__IB_SYSFS_ROOT": str(tmp_path / "ib"), "COLUMNS": "200"})
    assert proc.returncode == 1
    assert "link_downed=3" in proc.stdout and "WARN" in proc.stdout


def test_unknown_check_is_a_clear_usage_error() -> None:
    proc = run_cli(["--checks", "nvml,gpu-magic"], {})
    assert proc.returncode == 3 and "unknown check(s) gpu-magic" in proc.stderr and not proc.stdout


def test_fast_and_no_prefect_on_the_prolog_path(tmp_path: Path) -> None:
    code = (
        "import sys, time; t = time.perf_counter()\n"
        "from pitstop.cli.entry import main\n"
        "try:\n    main(['node-check', '--json'])\n"
        "except SystemExit:\n    pass\n"
        "sys.stderr.write(f\"\\nELAPSED {time.perf_counter() - t:.3f} PREFECT {'prefect' in sys.modules}\\n\")\n"
    )
    env = {**os.environ, "PITSTOP_NODE_CHECK__IB_SYSFS_ROOT": str(tmp_path)}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=False)
    wall = time.perf_counter() - started
    tail = proc.stderr.strip().splitlines()[-1]
    assert "PREFECT False" in tail, proc.stderr
    NodeCheckReport.model_validate_json(proc.stdout)
    assert wall < 5.0  # ~0.5 s on an idle machine; the margin is for a loaded 2-core CI box


def boom(ctx: CheckContext) -> CheckResult:
    raise KeyError("bug")


def test_a_crashing_check_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(CHECKS, "disk", CheckSpec("disk", f"{__name__}:boom", "raises"))
    monkeypatch.setitem(CHECKS, "gone", CheckSpec("gone", "pitstop.node.no_such_module:check", "not importable"))
    report = run_checks(["disk", "gone"], CheckContext(load_settings()))
    assert report.checks[0].status is CheckStatus.WARN and "KeyError" in report.checks[0].summary
    assert report.checks[1].status is CheckStatus.WARN and "ModuleNotFoundError" in report.checks[1].summary
    assert report.overall is CheckStatus.WARN


def test_check_names() -> None:
    assert parse_check_names(None, ["nvml", "xid"]) == ["nvml", "xid"]
    assert parse_check_names(" XID, disk,xid ", []) == ["xid", "disk"]
    with pytest.raises(UnknownCheck, match=f"choose from {', '.join(CHECKS)}$"):
        parse_check_names("nope", [])


def test_every_registry_row_names_an_importable_check() -> None:
    for name, spec in CHECKS.items():
        assert spec.name == name and spec.help and callable(load(spec)), spec


def test_defaults_come_from_the_registry() -> None:
    assert NodeCheckSettings().checks == registry.default_checks() == [n for n, s in CHECKS.items() if s.default]
    assert TriggerSettings().prolog_checks == registry.prolog_checks()
    assert "dcgm" not in registry.default_checks() and "ipmi" not in registry.default_checks()  # slow: opt-in
    assert set(registry.prolog_checks()) <= set(registry.default_checks())


def test_help_lists_every_check_from_the_registry() -> None:
    proc = run_cli(["--help"], {"COLUMNS": "200"})
    assert proc.returncode == 0
    for name, spec in CHECKS.items():
        assert f"{name}{' *' if spec.default else ''}: {spec.help}" in proc.stdout, name
    assert ",".join(CHECKS) in proc.stdout


def test_default_run_on_this_machine_never_fails_it() -> None:
    """Every default check runs here; missing tools and files are UNAVAILABLE, never a crash or FAIL."""
    proc = run_cli(["--json"], {})
    report = NodeCheckReport.model_validate_json(proc.stdout)
    assert [c.name for c in report.checks] == registry.default_checks()
    assert all(c.status in (CheckStatus.OK, CheckStatus.UNAVAILABLE) for c in report.checks), report.checks
    assert proc.returncode == 0


def test_only_the_named_checks_are_imported() -> None:
    code = ("import sys\nfrom pitstop.cli.entry import main\ntry:\n    main(['node-check', '--json', '--checks', 'disk'])\n"
            "except SystemExit:\n    pass\nsys.stderr.write('\\nMODULES ' + ' '.join(sorted(m for m in sys.modules if m.startswith('pitstop.node.'))))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60, check=False)
    loaded = proc.stderr.rsplit("MODULES", 1)[1].split()
    assert "pitstop.node.disk" in loaded
    assert not {"pitstop.node.ipmi", "pitstop.node.nvme", "pitstop.node.nvml", "pitstop.node.mounts"} & set(loaded), loaded
