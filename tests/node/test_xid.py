"""Xid catalog and the pure kernel-log parser."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from pitstop.models import CheckStatus
from pitstop.node.xid import XID_CATALOG, Implicates, parse_kernel_log, recovery_action

NOW = datetime(2026, 12, 2, 15, 0, tzinfo=UTC)
REQUIRED = [13, 31, 32, 38, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120,
            121, 140, 143, *range(144, 151), 154]


def test_catalog_covers_the_required_xids_with_nvidias_buckets() -> None:
    missing = [x for x in REQUIRED if x not in XID_CATALOG]
    assert not missing
    assert XID_CATALOG[79].immediate == "RESTART_BM" and XID_CATALOG[79].implicates is Implicates.HARDWARE
    assert XID_CATALOG[48].immediate == "WORKFLOW_XID_48" and XID_CATALOG[48].implicates is Implicates.MEMORY
    assert XID_CATALOG[13].immediate == "RESTART_APP" and XID_CATALOG[13].implicates is Implicates.APP
    assert XID_CATALOG[95].immediate == "RESET_GPU"
    assert XID_CATALOG[63].immediate == "IGNORE"
    assert {XID_CATALOG[x].immediate for x in range(144, 151)} == {"WORKFLOW_NVLINK5_ERR"}


def test_raw_dmesg_uptime_stamps_and_a_truncated_line(node_fixtures: Path) -> None:
    scan = parse_kernel_log((node_fixtures / "kernel/dmesg.txt").read_text(), now=NOW)
    assert [e.xid for e in scan.events] == [63, 13, 79]
    fell_off = scan.events[2]
    assert (fell_off.pci_bus, fell_off.pid, fell_off.process) == ("0000:3b:00", 22041, "python")
    assert fell_off.uptime_s == pytest.approx(12345.678901) and fell_off.timestamp is None
    assert fell_off.message == "GPU has fallen off the bus."
    assert fell_off.status is CheckStatus.FAIL
    assert scan.events[0].status is CheckStatus.OK  # 63 alone: the row remapper did its job
    assert scan.events[1].status is CheckStatus.WARN  # 13: the application's fault
    assert len(scan.malformed) == 1 and scan.malformed[0].endswith("NVRM: Xid (PCI:0000:3b:00):")


def test_dmesg_T_wallclock(node_fixtures: Path) -> None:
    scan = parse_kernel_log((node_fixtures / "kernel/dmesg_T.txt").read_text(), now=NOW)
    assert [e.xid for e in scan.events] == [48, 45, 94]
    dbe = scan.events[0]
    assert dbe.pid is None and dbe.process is None  # pid='<unknown>'
    assert dbe.timestamp is not None and dbe.timestamp.date().isoformat() == "2026-12-01"
    assert [e.status for e in scan.events] == [CheckStatus.FAIL, CheckStatus.OK, CheckStatus.WARN]


def test_journalctl_short_and_xid_154_recovery_action(node_fixtures: Path) -> None:
    scan = parse_kernel_log((node_fixtures / "kernel/journalctl_short.txt").read_text(), now=NOW)
    assert [e.xid for e in scan.events] == [74, 154]
    assert scan.events[0].timestamp == datetime(2026, 12, 1, 10, 2, 17).astimezone().astimezone(UTC)
    assert recovery_action(scan.events[1].message) == "GPU Reset Required"
    assert scan.events[1].status is CheckStatus.FAIL


def test_short_iso_and_unknown_xid(node_fixtures: Path) -> None:
    scan = parse_kernel_log((node_fixtures / "kernel/journalctl_short_iso.txt").read_text(), now=NOW)
    assert [e.xid for e in scan.events] == [119, 31, 999]
    assert scan.events[0].timestamp == datetime(2026, 12, 1, 11, 40, tzinfo=UTC)
    assert scan.events[2].info is None and scan.events[2].status is CheckStatus.WARN


def test_syslog_dates_without_a_year_never_land_in_the_future() -> None:
    line = "Dec 31 23:59:00 gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    event = parse_kernel_log(line, now=datetime(2027, 1, 1, 0, 5, tzinfo=UTC)).events[0]
    assert event.timestamp is not None and event.timestamp.year == 2026


@pytest.mark.parametrize(
    "text",
    [b"", b"\x00\xff\xfe garbage \x80\x81\n\n", "NVRM: Xid", "NVRM: Xid (PCI:0000:3b:00): seventy-nine",
     "x" * 2_000_000, b"[1.0] NVRM: Xid (PCI:0000:3b:00): 79, \xff\xfe bad bytes"],
)
def test_garbage_empty_truncated_and_huge_inputs_never_raise(text: str | bytes) -> None:
    scan = parse_kernel_log(text, now=NOW)
    assert all(e.xid == 79 for e in scan.events)
    assert len(scan.events) + len(scan.malformed) <= 1


def test_same_line_same_key_different_time_different_key() -> None:
    a = parse_kernel_log("[1.0] NVRM: Xid (PCI:0000:3b:00): 79, x", now=NOW).events[0]
    b = parse_kernel_log("[1.0] NVRM: Xid (PCI:0000:3b:00): 79, x", now=NOW).events[0]
    c = parse_kernel_log("[2.0] NVRM: Xid (PCI:0000:3b:00): 79, x", now=NOW).events[0]
    assert a.key == b.key != c.key
