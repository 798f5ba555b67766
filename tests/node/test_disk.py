"""Disk space and inodes, on the real filesystems of this machine."""

from __future__ import annotations

from pathlib import Path

from pitstop.config import MountThreshold, NodeCheckSettings
from pitstop.models import CheckStatus
from pitstop.node.disk import check_disk, default_mounts


def test_default_mounts_are_root_and_home_once_per_filesystem(tmp_path: Path) -> None:
    mounts = default_mounts(tmp_path / "not" / "yet" / "created")
    assert mounts[0].path == Path("/") and len(mounts) in (1, 2)


def test_thresholds_decide(tmp_path: Path) -> None:
    ok = check_disk(NodeCheckSettings(mounts=[MountThreshold(path=tmp_path, warn_free_pct=0, fail_free_pct=0)]), tmp_path)
    assert ok.status is CheckStatus.OK and ok.details["mounts"][0]["free_bytes"] > 0
    warn = check_disk(NodeCheckSettings(mounts=[MountThreshold(path=tmp_path, warn_free_pct=100, fail_free_pct=0)]), tmp_path)
    assert warn.status is CheckStatus.WARN and "warn below 100%" in warn.summary
    fail = check_disk(NodeCheckSettings(mounts=[MountThreshold(path=tmp_path, warn_free_pct=100, fail_free_pct=100)]), tmp_path)
    assert fail.status is CheckStatus.FAIL and "fail below 100%" in fail.summary


def test_missing_mount_fails_with_a_reason(tmp_path: Path) -> None:
    result = check_disk(NodeCheckSettings(mounts=[MountThreshold(path=tmp_path / "scratch")]), tmp_path)
    assert result.status is CheckStatus.FAIL and "does not exist (not mounted?)" in result.summary


def test_odd_names(tmp_path: Path) -> None:
    odd = tmp_path / "spa ce\nnew-line é"
    odd.mkdir()
    result = check_disk(NodeCheckSettings(mounts=[MountThreshold(path=odd, warn_free_pct=0, fail_free_pct=0)]), tmp_path)
    assert result.status is CheckStatus.OK


def test_a_hung_mount_fails_in_time_and_the_others_are_still_judged(tmp_path):
    """statvfs on a stale NFS mount blocks in the kernel; here the blocking call is a real open of a
    FIFO nobody writes to, standing in for it: the check answers within its timeout."""
    import os
    import time

    fifo = tmp_path / "hung"
    os.mkfifo(fifo)
    stale = tmp_path / "stale"

    def statvfs(path):
        if path == stale:
            open(fifo, "rb").read()  # blocks: no writer
        return os.statvfs(path)

    settings = NodeCheckSettings(mount_timeout_s=0.5, mounts=[
        MountThreshold(path=stale, warn_free_pct=0, fail_free_pct=0),
        MountThreshold(path=tmp_path, warn_free_pct=0, fail_free_pct=0)])
    started = time.monotonic()
    result = check_disk(settings, tmp_path, statvfs=statvfs)
    assert time.monotonic() - started < 3
    assert result.status.value == "FAIL" and "stale or hung mount" in result.summary
    statuses = {m["path"]: m["status"] for m in result.details["mounts"]}
    assert statuses == {str(stale): "FAIL", str(tmp_path): "OK"}
    with open(fifo, "wb"):  # release the abandoned thread
        pass
