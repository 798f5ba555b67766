"""Free space and free inodes of the filesystems a node needs."""

from __future__ import annotations

import os
from pathlib import Path

from pitstop.config import MountThreshold, NodeCheckSettings
from pitstop.models import CheckResult, CheckStatus
from pitstop.node.status import worst
from pitstop.node.tool import call_all_within


def default_mounts(home: Path) -> list[MountThreshold]:
    """/ and the filesystem holding PITSTOP_HOME (its nearest existing parent, before first use)."""
    probe = home
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    by_device: dict[int | str, Path] = {}
    for path in (Path("/"), probe):
        try:
            key: int | str = os.stat(path).st_dev  # one entry per filesystem
        except OSError:
            key = str(path)
        by_device.setdefault(key, path)
    return [MountThreshold(path=p) for p in by_device.values()]


def mount_findings(mount: MountThreshold, statvfs=os.statvfs) -> tuple[CheckStatus, str, dict]:
    """One filesystem's verdict. A configured path that is missing is a FAIL: jobs would fail."""
    try:
        st = statvfs(mount.path)
    except FileNotFoundError:
        return CheckStatus.FAIL, f"{mount.path} does not exist (not mounted?)", {"path": str(mount.path)}
    except OSError as exc:
        return CheckStatus.FAIL, f"{mount.path} cannot be read: {exc.strerror or exc}", {"path": str(mount.path)}
    free_pct = 100.0 * st.f_bavail / st.f_blocks if st.f_blocks else None
    inode_pct = 100.0 * st.f_favail / st.f_files if st.f_files else None  # 0 files: fs without inodes
    info = {
        "path": str(mount.path),
        "free_bytes": st.f_bavail * st.f_frsize,
        "total_bytes": st.f_blocks * st.f_frsize,
        "free_pct": round(free_pct, 2) if free_pct is not None else None,
        "free_inodes_pct": round(inode_pct, 2) if inode_pct is not None else None,
    }
    checks = [
        (free_pct, mount.fail_free_pct, mount.warn_free_pct, "space"),
        (inode_pct, mount.fail_free_inodes_pct, mount.warn_free_inodes_pct, "inodes"),
    ]
    for pct, fail, warn, what in checks:
        if pct is not None and pct < fail:
            return CheckStatus.FAIL, f"{mount.path}: only {pct:.1f}% {what} free (fail below {fail:g}%)", info
    for pct, fail, warn, what in checks:
        if pct is not None and pct < warn:
            return CheckStatus.WARN, f"{mount.path}: {pct:.1f}% {what} free (warn below {warn:g}%)", info
    return CheckStatus.OK, f"{mount.path}: {free_pct or 0:.0f}% free", info


def check_disk(settings: NodeCheckSettings, home: Path, statvfs=os.statvfs) -> CheckResult:
    mounts = settings.mounts or default_mounts(home)
    # statvfs on a hung NFS/Lustre mount blocks in the kernel: each runs in a thread that is
    # abandoned after mount_timeout_s, so one stale mount cannot hang the check.
    answers = call_all_within(lambda m: mount_findings(m, statvfs), mounts, settings.mount_timeout_s, name="statvfs")
    results = [a if a is not None else (
        CheckStatus.FAIL, f"{m.path}: no answer to statvfs within {settings.mount_timeout_s:g} s: stale or hung mount",
        {"path": str(m.path)}) for m, a in zip(mounts, answers)]
    status = worst(s for s, _, _ in results)
    bad = [msg for s, msg, _ in results if s is status and s is not CheckStatus.OK]
    summary = "; ".join(bad) if bad else ", ".join(msg for _, msg, _ in results)
    return CheckResult(
        name="disk", status=status, summary=summary,
        details={"mounts": [dict(info, status=s.value) for s, _, info in results]},
    )
