"""Reads the kernel log (journalctl or dmesg) and remembers which Xids were already reported.

The watermark (last timestamp seen + hashes of recent Xid lines) lives in a small JSON file under
PITSTOP_HOME, so an Xid is reported by exactly one node-check run, however often it runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from pitstop.config import NodeCheckSettings
from pitstop.models import CheckResult, CheckStatus
from pitstop.node.status import worst
from pitstop.node.xid import XidEvent, parse_kernel_log

MAX_KEYS = 5000  # a bounded memory of lines already reported; dmesg's ring buffer is smaller
# journalctl --since has one-second resolution and clocks jitter: re-read a little, dedupe by hash
OVERLAP = timedelta(minutes=2)


class KernelLogRead(BaseModel):
    source: str = Field(description="journalctl | dmesg | none")
    text: str = ""
    error: str | None = None


class Watermark(BaseModel):
    version: int = 1
    last_ts: datetime | None = None
    keys: list[str] = Field(default_factory=list)


KernelLogReader = Callable[[str, datetime, float], KernelLogRead]


def _run(argv: list[str], timeout_s: float) -> tuple[int, str, str]:
    proc = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
    return (
        proc.returncode,
        proc.stdout.decode("utf-8", errors="replace"),
        proc.stderr.decode("utf-8", errors="replace"),
    )


def _journalctl(since: datetime, timeout_s: float) -> KernelLogRead:
    if shutil.which("journalctl") is None:
        return KernelLogRead(source="journalctl", error="journalctl is not installed")
    stamp = since.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    argv = ["journalctl", "-k", "-o", "short-iso", "--no-pager", "--since", stamp]
    rc, out, err = _run(argv, timeout_s)
    if rc != 0:
        return KernelLogRead(source="journalctl", error=f"journalctl exited {rc}: {err.strip()[:300]}")
    if "No journal files were found" in err + out:
        return KernelLogRead(source="journalctl", error="journalctl has no journal files on this node")
    if "insufficient permissions" in err + out:  # not root / not in systemd-journal: fall back
        return KernelLogRead(source="journalctl", error="journalctl: insufficient permissions for the journal")
    return KernelLogRead(source="journalctl", text=out)


def _dmesg(timeout_s: float) -> KernelLogRead:
    if shutil.which("dmesg") is None:
        return KernelLogRead(source="dmesg", error="dmesg is not installed")
    rc, out, err = _run(["dmesg", "--time-format", "iso"], timeout_s)
    if rc != 0:  # old util-linux: no --time-format; plain dmesg still gives uptime stamps
        rc, out, err = _run(["dmesg"], timeout_s)
    if rc != 0:
        hint = " (kernel.dmesg_restrict? run as root or via slurmd)" if "ermitted" in err else ""
        return KernelLogRead(source="dmesg", error=f"dmesg exited {rc}: {err.strip()[:300]}{hint}")
    return KernelLogRead(source="dmesg", text=out)


def read_kernel_log(source: str, since: datetime, timeout_s: float) -> KernelLogRead:
    """Kernel messages since `since`; `source` is auto (journalctl, then dmesg), journalctl or dmesg."""
    errors: list[str] = []
    order = {"auto": ["journalctl", "dmesg"], "journalctl": ["journalctl"], "dmesg": ["dmesg"]}
    for name in order.get(source, ["journalctl", "dmesg"]):
        try:
            read = _journalctl(since, timeout_s) if name == "journalctl" else _dmesg(timeout_s)
        except subprocess.TimeoutExpired:
            read = KernelLogRead(source=name, error=f"{name} did not answer within {timeout_s:g} s")
        except OSError as exc:
            read = KernelLogRead(source=name, error=f"{name} could not be run: {exc}")
        if read.error is None:
            return read
        errors.append(read.error)
    return KernelLogRead(source="none", error="; ".join(errors))


def watermark_path(settings: NodeCheckSettings, home: Path) -> Path:
    return settings.xid_watermark_file or home / "node" / "xid-watermark.json"


def load_watermark(path: Path) -> tuple[Watermark, str | None]:
    """The stored watermark; a corrupt file is kept aside (never deleted) and scanning restarts."""
    if not path.exists():
        return Watermark(), None
    try:
        return Watermark.model_validate_json(path.read_bytes()), None
    except (ValidationError, ValueError, OSError) as exc:
        aside = path.with_name(f"{path.name}.corrupt-{datetime.now(UTC):%Y%m%dT%H%M%S}")
        try:
            path.replace(aside)
        except OSError:
            aside = path
        return Watermark(), f"Xid watermark {path} was unreadable ({exc.__class__.__name__}); kept as {aside}"


def save_watermark(path: Path, mark: Watermark) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(mark.model_dump_json(), encoding="utf-8")
    os.replace(tmp, path)  # atomic: a crash never leaves half a watermark


def select_new(events: list[XidEvent], mark: Watermark, since: datetime) -> list[XidEvent]:
    """Xids not reported before: unseen line hash, and not older than the scan window."""
    seen = set(mark.keys)
    fresh: list[XidEvent] = []
    for event in events:
        if event.key in seen:
            continue
        if event.timestamp is not None and event.timestamp < since:
            continue
        seen.add(event.key)
        fresh.append(event)
    return fresh


def advance(mark: Watermark, events: list[XidEvent], now: datetime) -> Watermark:
    """The log was read up to `now`; the next read starts there (minus OVERLAP, deduped by hash)."""
    known = set(mark.keys)
    keys = [*mark.keys, *(e.key for e in events if e.key not in known)][-MAX_KEYS:]
    return Watermark(last_ts=now, keys=keys)


def check_xid(
    settings: NodeCheckSettings,
    home: Path,
    *,
    reader: KernelLogReader = read_kernel_log,
    now: datetime | None = None,
    commit: bool = True,
) -> CheckResult:
    """Report Xids logged since the last run (or the lookback window on a first run)."""
    now = now or datetime.now(UTC)
    path = watermark_path(settings, home)
    mark, note = load_watermark(path)
    lookback_start = now - timedelta(seconds=settings.xid_lookback_s)
    since = max(mark.last_ts - OVERLAP, lookback_start) if mark.last_ts else lookback_start
    read = reader(settings.kernel_log_source, since, settings.kernel_log_timeout_s)
    if read.error is not None:
        return CheckResult(
            name="xid",
            status=CheckStatus.UNAVAILABLE,
            summary=f"cannot read the kernel log: {read.error}",
            details={"source": read.source},
        )
    scan = parse_kernel_log(read.text, now=now)
    fresh = select_new(scan.events, mark, since)
    if commit:
        save_watermark(path, advance(mark, scan.events, now))
    details = {
        "source": read.source,
        "since": since.isoformat(),
        "watermark": str(path),
        "events": [_event_detail(e) for e in fresh],
        "malformed_lines": scan.malformed[:20],
    }
    if note:
        details["note"] = note
    status = worst(e.status for e in fresh)
    if not fresh:
        summary = f"no new Xid in the kernel log since {since:%Y-%m-%d %H:%M} UTC"
        if scan.malformed:
            status, summary = CheckStatus.WARN, f"{summary}, but {len(scan.malformed)} Xid line(s) were cut off"
        return CheckResult(name="xid", status=status, summary=summary, details=details)
    top = max(fresh, key=lambda e: ({CheckStatus.FAIL: 2, CheckStatus.WARN: 1}.get(e.status, 0), e.line_no))
    info = top.info
    what = f"{info.description}; NVIDIA action {info.immediate}" if info else "not in NVIDIA's catalog"
    where = f" on GPU {top.pci_bus}" if top.pci_bus else ""
    more = f" (+{len(fresh) - 1} more)" if len(fresh) > 1 else ""
    return CheckResult(
        name="xid", status=status, summary=f"Xid {top.xid}{where}: {what}{more}", details=details
    )


def _event_detail(event: XidEvent) -> dict:
    info = event.info
    return {
        "xid": event.xid,
        "status": event.status.value,
        "pci_bus": event.pci_bus,
        "pid": event.pid,
        "process": event.process,
        "mnemonic": info.mnemonic if info else None,
        "description": info.description if info else None,
        "immediate_action": info.immediate if info else None,
        "investigatory_action": info.investigatory if info else None,
        "implicates": info.implicates.value if info else None,
        "timestamp": event.timestamp.isoformat() if event.timestamp else None,
        "uptime_s": event.uptime_s,
        "message": event.message,
    }
