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
