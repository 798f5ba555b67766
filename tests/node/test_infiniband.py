"""InfiniBand: a fake sysfs tree in the real file formats, and the ibstat fallback parser."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from pitstop.config import NodeCheckSettings
from pitstop.models import CheckStatus
from pitstop.node.infiniband import check_ib, parse_ibstat, parse_rate, parse_state, read_sysfs
from pitstop.node.status import NodeParseError

HEALTHY = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "200 Gb/sec (4X HDR)", "link_layer": "InfiniBand"}
COUNTERS = {"symbol_error": 0, "link_downed": 0, "port_rcv_errors": 0, "link_error_recovery": 0,
            "excessive_buffer_overrun_errors": 0, "port_xmit_discards": 3, "port_xmit_data": 123456789}


def make_port(root: Path, dev: str, port: int, attrs: dict | None = None, counters: dict | None = None) -> Path:
    pdir = root / dev / "ports" / str(port)
    (pdir / "counters").mkdir(parents=True)
    for name, value in {**HEALTHY, **(attrs or {})}.items():
        (pdir / name).write_text(f"{value}\n")
    for name, value in {**COUNTERS, **(counters or {})}.items():
        (pdir / "counters" / name).write_text(f"{value}\n")
    return pdir


def settings(root: Path, **kw: object) -> NodeCheckSettings:
    return NodeCheckSettings(ib_sysfs_root=root, ibstat_path=str(root / "no-ibstat"), **kw)


def test_formats() -> None:
    assert parse_state("4: ACTIVE") == "ACTIVE" and parse_state("5: LinkUp") == "LinkUp"
    assert parse_rate("200 Gb/sec (4X HDR)") == 200.0 and parse_rate("400") == 400.0 and parse_rate("junk") is None


def test_healthy_ports(tmp_path: Path) -> None:
    make_port(tmp_path, "mlx5_0", 1)
    make_port(tmp_path, "mlx5_1", 1)
    result = check_ib(settings(tmp_path, ib_expected_rate_gbps=200))
    assert result.status is CheckStatus.OK
    assert result.summary == "2 IB port(s) ACTIVE/LinkUp (200 Gb/sec (4X HDR))"
    assert result.details["ports"][0]["counters"]["port_xmit_data"] == 123456789


def test_port_down_fails_and_names_the_port(tmp_path: Path) -> None:
    make_port(tmp_path, "mlx5_0", 1)
    make_port(tmp_path, "mlx5_3", 1, {"state": "1: DOWN", "phys_state": "2: Polling", "rate": "10 Gb/sec (4X SDR)"})
    result = check_ib(settings(tmp_path))
    assert result.status is CheckStatus.FAIL
    assert result.summary.startswith("mlx5_3 port 1 is DOWN (want ACTIVE)")


def test_degraded_rate_and_error_counters_warn(tmp_path: Path) -> None:
    make_port(tmp_path, "mlx5_0", 1, {"rate": "100 Gb/sec (4X EDR)"}, {"symbol_error": 5000, "link_downed": 2})
    result = check_ib(settings(tmp_path, ib_expected_rate_gbps=200))
    assert result.status is CheckStatus.WARN
    messages = [f["message"] for f in result.details["findings"]]
    assert any("degraded" in m for m in messages)
    assert "mlx5_0 port 1 symbol_error=5000 (limit 100)" in messages
    assert "mlx5_0 port 1 link_downed=2 (limit 0)" in messages


def test_garbage_and_unreadable_sysfs_files_degrade(tmp_path: Path) -> None:
    pdir = make_port(tmp_path, "mlx5_0", 1, counters={"symbol_error": "not-a-number"})
    (pdir / "rate").write_bytes(b"\xff\xfe" * 5000)  # not a sysfs attribute: too long, not UTF-8
    (pdir / "state").unlink()
    (tmp_path / "mlx5_0" / "ports" / "odd name").mkdir()
    ports = read_sysfs(tmp_path)
    assert len(ports) == 1
    assert set(ports[0].unreadable) >= {"state", "rate", "counters/symbol_error"}
    assert ports[0].phys_state == "LinkUp" and ports[0].rate_gbps is None
    assert check_ib(settings(tmp_path)).status is CheckStatus.OK


def test_no_devices_at_all_is_unavailable(tmp_path: Path) -> None:
    result = check_ib(settings(tmp_path / "absent"))
    assert result.status is CheckStatus.UNAVAILABLE and "no InfiniBand devices" in result.summary


def test_ibstat_fixture(node_fixtures: Path) -> None:
    ports = parse_ibstat((node_fixtures / "ibstat" / "ibstat_two_hcas.txt").read_text())
    assert [(p.device, p.port, p.state, p.phys_state, p.rate_gbps) for p in ports] == [
        ("mlx5_0", 1, "ACTIVE", "LinkUp", 200.0),
        ("mlx5_1", 1, "DOWN", "Polling", 10.0),
    ]


@pytest.mark.parametrize("text", ["\tPort 1:\n\t\tState: Active\n", "random words\nmore", b"\x00\xff"])
def test_ibstat_garbage_is_a_typed_error(text: str | bytes) -> None:
    with pytest.raises(NodeParseError):
        parse_ibstat(text)


def _tool(tmp_path: Path, body: str) -> Path:
    tool = tmp_path / "ibstat"
    tool.write_text("#!/bin/sh\n" + body)
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return tool


def test_ibstat_fallback_when_sysfs_is_empty(tmp_path: Path, node_fixtures: Path) -> None:
    tool = _tool(tmp_path, f'cat "{node_fixtures / "ibstat" / "ibstat_two_hcas.txt"}"\n')
    result = check_ib(NodeCheckSettings(ib_sysfs_root=tmp_path / "none", ibstat_path=str(tool)))
    assert result.details["source"] == "ibstat" and result.status is CheckStatus.FAIL
    assert "mlx5_1 port 1 is DOWN" in result.summary


def test_ibstat_printing_nothing_is_unavailable_not_healthy(tmp_path: Path) -> None:
    tool = _tool(tmp_path, "exit 0\n")  # what ibstat does on a host without an HCA
    result = check_ib(NodeCheckSettings(ib_sysfs_root=tmp_path / "none", ibstat_path=str(tool)))
    assert result.status is CheckStatus.UNAVAILABLE and "lists no HCA" in result.summary
