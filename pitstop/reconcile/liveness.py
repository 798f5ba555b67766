"""Is a process still remediating an incident? Asked of the incident lock, not of Prefect.

On SQLite, while a flow remediates an incident it holds an exclusive flock on
`$PITSTOP_HOME/locks/incident-<id>.lock` (tasks/journal.incident_lock) with its host name on
the first line; the kernel drops the lock when the process dies, `kill -9` included. Prefect
cannot tell: a run whose process was killed stays RUNNING there. This module probes that file;
on PostgreSQL the lock is an advisory lock that every host sees (pitstop.store.locks, whose
`incident_locks(store, home).state(id)` answers for either kind).
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path
from typing import Literal

LockState = Literal["held", "free", "unknown"]


def incident_lock_path(home: Path, incident_id: int) -> Path:
    # The path tasks/journal.incident_lock takes (tests/triggers/test_reconcile_liveness.py
    # holds one with it and checks that this module sees it).
    return home / "locks" / f"incident-{incident_id}.lock"


def this_host() -> str:
    return os.uname().nodename or socket.gethostname()


def lock_state(path: Path, host: str | None = None) -> LockState:
    """held: a live process holds it; free: nobody does; unknown: never taken here (the run may
    live on another machine with its own PITSTOP_HOME) or taken by another host."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return "unknown"
    except OSError:
        return "unknown"
    try:
        first = os.pread(fd, 256, 0).decode("utf-8", "replace").split(" ", 1)[0].strip()
        if first and first != (host or this_host()):
            return "unknown"  # a flock says nothing about a process on another machine
        try:
            # A shared lock is refused while a remediating process holds its exclusive one, and
            # is dropped at once otherwise (a run starting in that instant sees "busy" and
            # leaves the incident to the next reconciliation).
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return "held"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return "free"
    finally:
        os.close(fd)
