"""The incident lock: one process at a time remediates an incident, wherever it runs.

The lock lives where the incidents live, so every process that can see an incident also sees
who holds it:

- PostgreSQL (several machines, several workers): a session-level advisory lock keyed
  (INCIDENT_LOCK_SPACE, incident id), taken with `pg_try_advisory_lock` on a connection of its
  own and held for the whole remediation. PostgreSQL drops it when that connection ends, so a
  run killed on any host (kill -9, a host lost) frees it; `pg_locks` shows it to every
  reconciler. The connection's application_name names the holder (host, pid, flow run), so
  `SELECT application_name FROM pg_stat_activity` tells an operator who has it.
  (PostgreSQL docs, "Advisory Locks" and "pg_locks": session-level locks are held until
  released or the session ends; each database has its own keys.)
- SQLite (one machine): an exclusive flock on `$PITSTOP_HOME/locks/incident-<id>.lock` with the
  holder on its first line; the kernel drops it with the process. It says nothing about another
  machine, which is why a shared PostgreSQL is needed for more than one.

Pick one with `incident_locks(store, home)`; the flows use it through tasks/journal.incident_lock,
reconciliation through `.state()`.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from pitstop.reconcile.liveness import LockState, incident_lock_path, lock_state, this_host
from pitstop.store.db import Store

# First key of every incident lock (the second is the incident id): "INCD". The schema lock uses
# the one-key form, which PostgreSQL keeps apart from two-key locks, so they never collide.
INCIDENT_LOCK_SPACE = 0x494E_4344


class IncidentBusy(RuntimeError):
    """Another live run is remediating this incident right now."""


def _busy(incident_id: int) -> IncidentBusy:
    return IncidentBusy(f"incident {incident_id} is being remediated by another run")


def holder(flow_run_id: str | None) -> str:
    """Who holds a lock, host first (a file lock is only trusted on the host that wrote it)."""
    return f"{this_host()} pid={os.getpid()} flow_run={flow_run_id}"


class IncidentLocks(Protocol):
    def hold(self, incident_id: int, flow_run_id: str | None) -> AbstractContextManager[None]:
        """Held for the `with` block; raises IncidentBusy at once if someone else has it."""
        ...

    def state(self, incident_id: int) -> LockState:
        """held / free / unknown (the lock cannot say: see each kind)."""
        ...


class FileLocks:
    """flock files under PITSTOP_HOME: one machine only."""

    def __init__(self, home: Path) -> None:
        self.home = home

    @contextmanager
    def hold(self, incident_id: int, flow_run_id: str | None) -> Iterator[None]:
        path = incident_lock_path(self.home, incident_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise _busy(incident_id) from None
            handle.seek(0)
            handle.truncate()
            handle.write(f"{holder(flow_run_id)}\n")
            handle.flush()
            try:
                yield None
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def state(self, incident_id: int) -> LockState:
        return lock_state(incident_lock_path(self.home, incident_id), this_host())


class AdvisoryLocks:
    """PostgreSQL advisory locks: every host that reaches the database sees them."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @contextmanager
    def hold(self, incident_id: int, flow_run_id: str | None) -> Iterator[None]:
        key = {"space": INCIDENT_LOCK_SPACE, "id": incident_id}
        # autocommit: the connection waits idle for the whole remediation, never "idle in
        # transaction" (which idle_in_transaction_session_timeout would end, lock and all)
        conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            conn.execute(text("SELECT set_config('application_name', :name, false)"),
                         {"name": f"pitstop incident {incident_id}: {holder(flow_run_id)}"[:63]})
            if not conn.execute(text("SELECT pg_try_advisory_lock(:space, :id)"), key).scalar():
                raise _busy(incident_id)
            try:
                yield None
            finally:
                try:
                    conn.execute(text("SELECT pg_advisory_unlock(:space, :id)"), key)
                    conn.execute(text("SELECT set_config('application_name', '', false)"))
                except DBAPIError:
                    conn.invalidate()  # a session we cannot talk to is closed: that frees the lock
        finally:
            conn.close()

    def state(self, incident_id: int) -> LockState:
        query = text(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
            "WHERE d.datname = current_database() AND l.locktype = 'advisory' AND l.granted "
            "AND l.classid = CAST(:space AS oid) AND l.objid = CAST(:id AS oid) AND l.objsubid = 2")
        try:
            with self.engine.connect() as conn:
                held = conn.execute(query, {"space": INCIDENT_LOCK_SPACE, "id": incident_id}).scalar()
        except DBAPIError:
            return "unknown"  # the database does not answer: Prefect's word is all there is
        return "held" if held else "free"


# dialect -> the lock that every process using that database can see; anything else: files
LOCKS_BY_DIALECT = {"postgresql": AdvisoryLocks}


def incident_locks(store: Store | None, home: Path) -> IncidentLocks:
    """The incident lock for this store (no store: the file lock under `home`)."""
    kind = LOCKS_BY_DIALECT.get(store.engine.dialect.name) if store is not None else None
    return kind(store.engine) if kind is not None else FileLocks(home)
