"""Who a process is, beyond its pid: (pid, start time in clock ticks since boot, boot id).

A pid alone is reused; a pid with the same start time on the same boot is the same process.
Used to tell a wrapped run whose wrapper was killed from one still running, and a Prefect server
an earlier `pitstop up` started from an unrelated process that got its pid.

Only `os`: `pitstop run` records its own identity before every job starts.
"""

from __future__ import annotations

import os

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def _read(path: str, limit: int = 4096) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, limit).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def boot_id() -> str | None:
    text = _read(BOOT_ID_PATH, 64)
    return text.strip() if text else None


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) from /proc/<pid>/stat: fields 3 and 22, counted after the
    parenthesised command name, which may itself hold spaces and parentheses."""
    text = _read(f"/proc/{pid}/stat")
    if not text or ")" not in text:
        return None
    fields = text.rsplit(")", 1)[1].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def start_ticks(pid: int) -> int | None:
    stat = _stat(pid)
    return stat[1] if stat else None


def identity(pid: int | None = None) -> dict:
    """{"pid", "start_ticks", "boot_id"} of `pid` (default: this process)."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "start_ticks": start_ticks(pid), "boot_id": boot_id()}


def still_running(recorded: dict) -> bool | None:
    """True: that very process still runs; False: it is gone (or its pid now names another
    process, or the machine rebooted); None: cannot tell (no /proc, nothing recorded)."""
    pid = recorded.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    recorded_boot, now_boot = recorded.get("boot_id"), boot_id()
    if recorded_boot and now_boot and recorded_boot != now_boot:
        return False
    stat = _stat(pid)
    if stat is not None:
        state, ticks = stat
        if state in {"Z", "X"}:  # exited, not yet reaped by its parent: gone all the same
            return False
        return None if recorded.get("start_ticks") is None else ticks == recorded["start_ticks"]
    if start_ticks(os.getpid()) is not None:
        return False  # /proc answers for us, not for that pid: no such process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return None
