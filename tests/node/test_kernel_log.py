"""Reading the kernel log and the Xid watermark: an Xid is reported by exactly one run."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pitstop.config import NodeCheckSettings
from pitstop.models import CheckStatus
from pitstop.node.kernel_log import KernelLogRead, check_xid, read_kernel_log

NOW = datetime(2026, 12, 2, 15, 0, tzinfo=UTC)


class GrowingLog:
    """A kernel log that gains lines between runs; records the window each read asked for."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.asked: list[datetime] = []

    def __call__(self, source: str, since: datetime, timeout_s: float) -> KernelLogRead:
        self.asked.append(since)
        return KernelLogRead(source="journalctl", text="\n".join(self.lines))


def iso(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S+0000")


def test_an_old_xid_is_never_counted_twice(tmp_path: Path) -> None:
    settings = NodeCheckSettings(xid_watermark_file=tmp_path / "wm.json")
    log = GrowingLog([f"{iso(NOW - timedelta(hours=1))} gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."])
    first = check_xid(settings, tmp_path, reader=log, now=NOW)
    assert first.status is CheckStatus.FAIL and [e["xid"] for e in first.details["events"]] == [79]
    assert "RESTART_BM" in first.summary and "0000:3b:00" in first.summary

    second = check_xid(settings, tmp_path, reader=log, now=NOW + timedelta(minutes=5))
    assert second.status is CheckStatus.OK and second.details["events"] == []

    log.lines.append(f"{iso(NOW + timedelta(minutes=7))} gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=2, name=python, Graphics Exception")
    third = check_xid(settings, tmp_path, reader=log, now=NOW + timedelta(minutes=10))
    assert [e["xid"] for e in third.details["events"]] == [13] and third.status is CheckStatus.WARN
    # the first run looked back the configured window; later runs start near the watermark
    assert log.asked[0] == NOW - timedelta(seconds=settings.xid_lookback_s)
    assert log.asked[2] >= NOW - timedelta(minutes=5)


def test_uptime_stamped_dmesg_lines_dedupe_by_hash(tmp_path: Path) -> None:
    settings = NodeCheckSettings(xid_watermark_file=tmp_path / "wm.json")
    log = GrowingLog(["[12345.678901] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE"])
    assert check_xid(settings, tmp_path, reader=log, now=NOW).status is CheckStatus.FAIL
    assert check_xid(settings, tmp_path, reader=log, now=NOW).details["events"] == []


def test_xids_older_than_the_lookback_are_ignored(tmp_path: Path) -> None:
    settings = NodeCheckSettings(xid_watermark_file=tmp_path / "wm.json", xid_lookback_s=3600)
    log = GrowingLog([f"{iso(NOW - timedelta(days=3))} h kernel: NVRM: Xid (PCI:0000:3b:00): 79, old"])
    assert check_xid(settings, tmp_path, reader=log, now=NOW).status is CheckStatus.OK


def test_corrupt_watermark_is_kept_aside_and_scanning_continues(tmp_path: Path) -> None:
    wm = tmp_path / "wm.json"
    wm.write_bytes(b"\x00{not json")
    settings = NodeCheckSettings(xid_watermark_file=wm)
    result = check_xid(settings, tmp_path, reader=GrowingLog([]), now=NOW)
    assert result.status is CheckStatus.OK and "unreadable" in result.details["note"]
    aside = list(tmp_path.glob("wm.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == b"\x00{not json"
    assert json.loads(wm.read_text())["version"] == 1


def test_cut_off_xid_line_is_a_warning_not_silence(tmp_path: Path) -> None:
    settings = NodeCheckSettings(xid_watermark_file=tmp_path / "wm.json")
    result = check_xid(settings, tmp_path, reader=GrowingLog(["[1.0] NVRM: Xid (PCI:0000:3b:00): "]), now=NOW)
    assert result.status is CheckStatus.WARN and "cut off" in result.summary


def test_unreadable_kernel_log_is_unavailable(tmp_path: Path) -> None:
    def broken(source: str, since: datetime, timeout_s: float) -> KernelLogRead:
        return KernelLogRead(source="none", error="dmesg exited 1: Operation not permitted")

    result = check_xid(NodeCheckSettings(xid_watermark_file=tmp_path / "wm.json"), tmp_path, reader=broken, now=NOW)
    assert result.status is CheckStatus.UNAVAILABLE and "Operation not permitted" in result.summary
    assert not (tmp_path / "wm.json").exists()  # nothing read: the watermark must not move


def test_real_reader_on_this_machine_returns_text_or_a_reason() -> None:
    read = read_kernel_log("auto", datetime.now(UTC) - timedelta(hours=1), 5.0)
    assert read.source in {"journalctl", "dmesg", "none"}
    assert (read.error is None) or (read.source == "none" and read.error)
    assert read_kernel_log("dmesg", datetime.now(UTC), 5.0).source in {"dmesg", "none"}
