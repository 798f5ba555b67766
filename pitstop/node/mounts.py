"""Required mounts (NFS, Lustre, GPFS...): mounted, of the right type, and answering in time.

Presence comes from /proc/self/mountinfo, which the kernel answers without touching the
filesystems (format: Documentation/filesystems/proc.rst, "/proc/<pid>/mountinfo"):

    36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue
    (1)(2) (3)   (4)   (5)         (6)       (7)     (8) (9)  (10)      (11)

mount ID, parent ID, major:minor, root, mount point, options, optional fields ending with "-",
filesystem type, source, super options; spaces, tabs, newlines and backslashes in paths are
written as octal escapes (\\040, \\011, \\012, \\134).

Responsiveness is a stat + directory read (+ an optional probe file read) in a daemon thread per
mount. A stat on a stale hard-mounted NFS or an evicted Lustre client blocks in the kernel for
minutes or forever and cannot be interrupted from Python, so the check does not wait: after
`mount_timeout_s` it reports FAIL and abandons the thread (it ends with the node-check process).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from pydantic import BaseModel

from pitstop.config import RequiredMount
from pitstop.models import CheckResult, CheckStatus
from pitstop.node.status import NodeParseError, worst
from pitstop.node.tool import call_all_within

if TYPE_CHECKING:
    from pitstop.node.check import CheckContext

MAX_MOUNTINFO_BYTES = 16 * 1024 * 1024  # ~100 bytes a mount; a node with 100k mounts is broken anyway
PROBE_READ_BYTES = 4096
_OCTAL = re.compile(r"\\([0-7]{3})")


class MountEntry(BaseModel):
    mount_point: str
    fstype: str
    source: str
    options: str


class ProbeResult(NamedTuple):
    ok: bool
    elapsed_s: float
    error: str | None = None


def _unescape(text: str) -> str:
    """mountinfo's octal escapes (\\040 for a space) back to characters."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(text: str) -> list[MountEntry]:
    """Every mount in a mountinfo text. A malformed line raises `NodeParseError`."""
    entries: list[MountEntry] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        try:
            sep = fields.index("-", 6)
            entries.append(MountEntry(mount_point=_unescape(fields[4]), options=fields[5],
                                      fstype=fields[sep + 1], source=_unescape(fields[sep + 2])))
        except (ValueError, IndexError) as exc:
            raise NodeParseError(f"mountinfo line {number} is not in the kernel's format: {line[:120]!r}") from exc
    return entries


def find_mount(entries: list[MountEntry], path: Path) -> MountEntry | None:
    """The mount whose mount point is `path` (the last one wins: it is stacked on top)."""
    wanted = os.path.normpath(str(path))  # no realpath: resolving symlinks stats, which can hang
    found = [e for e in entries if e.mount_point == wanted]
    return found[-1] if found else None


def probe(mount: RequiredMount) -> ProbeResult:
    """Touch the mount the way a job would. Blocks as long as the filesystem does."""
    started = time.monotonic()
    try:
        os.stat(mount.path)
        with os.scandir(mount.path) as it:
            next(it, None)
        if mount.probe_file is not None:
            with open(mount.probe_file, "rb") as fh:
                fh.read(PROBE_READ_BYTES)
    except OSError as exc:
        return ProbeResult(False, time.monotonic() - started, f"{exc.strerror or exc} (errno {exc.errno})")
    return ProbeResult(True, time.monotonic() - started)


def probe_all(mounts: list[RequiredMount], timeout_s: float) -> list[ProbeResult | None]:
    """Probe every mount at once; None for each that did not answer within `timeout_s` in total."""
    return call_all_within(probe, mounts, timeout_s, name="mount-probe")


def process_mounts(required: list[RequiredMount], mountinfo: str,
                   probes: list[ProbeResult | None] | None, timeout_s: float) -> CheckResult:
    """The verdict from the mount table and the probe results (None: not probed / timed out). Pure."""
    if not required:
        return CheckResult(name="mounts", status=CheckStatus.UNAVAILABLE,
                           summary="no required mounts configured (node_check.required_mounts)")
    try:
        entries = parse_mountinfo(mountinfo)
    except NodeParseError as exc:
        return CheckResult(name="mounts", status=CheckStatus.WARN, summary=str(exc))
    probes = probes if probes is not None else [None] * len(required)
    rows: list[dict] = []
    for mount, result in zip(required, probes, strict=True):
        entry = find_mount(entries, mount.path)
        row = {"path": str(mount.path), "fstype": entry.fstype if entry else None,
               "source": entry.source if entry else None}
        if entry is None:
            row.update(status=CheckStatus.FAIL, message=f"{mount.path} is not mounted")
        elif mount.fstype and entry.fstype != mount.fstype:
            row.update(status=CheckStatus.FAIL,
                       message=f"{mount.path} is mounted as {entry.fstype} from {entry.source}, not {mount.fstype}")
        elif result is None:
            row.update(status=CheckStatus.FAIL,
                       message=f"{mount.path} ({entry.fstype} from {entry.source}) did not answer within "
                               f"{timeout_s:g} s: stale or hung mount")
        elif not result.ok:
            row.update(status=CheckStatus.FAIL, message=f"{mount.path} ({entry.fstype}) cannot be read: {result.error}")
        else:
            row.update(status=CheckStatus.OK, elapsed_ms=round(result.elapsed_s * 1000, 1),
                       message=f"{mount.path} ({entry.fstype}) answered in {result.elapsed_s * 1000:.0f} ms")
        rows.append(row)
    status = worst(r["status"] for r in rows)
    bad = [r["message"] for r in rows if r["status"] is not CheckStatus.OK]
    summary = "; ".join(bad) if bad else f"{len(rows)} required mount(s) answering"
    return CheckResult(name="mounts", status=status, summary=summary[:600],
                       details={"mounts": [dict(r, status=r["status"].value) for r in rows]})


def read_mountinfo(procfs_root: Path) -> str | None:
    try:
        with (procfs_root / "self" / "mountinfo").open("rb") as fh:
            return fh.read(MAX_MOUNTINFO_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None


def check(ctx: CheckContext) -> CheckResult:
    nc = ctx.settings.node_check
    if not nc.required_mounts:
        return process_mounts([], "", None, nc.mount_timeout_s)
    text = read_mountinfo(nc.procfs_root)
    if text is None:
        return CheckResult(name="mounts", status=CheckStatus.UNAVAILABLE,
                           summary=f"{nc.procfs_root}/self/mountinfo cannot be read")
    try:
        mounted = {e.mount_point for e in parse_mountinfo(text)}
    except NodeParseError:
        mounted = set()  # process_mounts reports the corrupt table
    # probe only what is mounted: probing a missing mount point would test the parent filesystem
    todo = [i for i, m in enumerate(nc.required_mounts) if os.path.normpath(str(m.path)) in mounted]
    answers = probe_all([nc.required_mounts[i] for i in todo], nc.mount_timeout_s)
    probes: list[ProbeResult | None] = [None] * len(nc.required_mounts)
    for i, answer in zip(todo, answers, strict=True):
        probes[i] = answer
    return process_mounts(nc.required_mounts, text, probes, nc.mount_timeout_s)
