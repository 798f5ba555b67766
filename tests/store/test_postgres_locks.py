"""The incident lock on both databases: one holder at a time, seen by reconciliation, freed
when its holder dies (kill -9). On PostgreSQL it is an advisory lock, so a second process with
its own PITSTOP_HOME (another machine, as far as files go) sees it too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from pitstop.models import Cause, Verdict
from pitstop.store import Store
from pitstop.store import records as r
from pitstop.reconcile.liveness import this_host
from pitstop.store.locks import AdvisoryLocks, FileLocks, IncidentBusy, incident_locks

REPO = Path(__file__).resolve().parents[2]
# Takes the flows' lock (tasks/journal.incident_lock) and keeps it until killed.
HOLDER = """
import sys, time
from pathlib import Path
from types import SimpleNamespace
from pitstop.store import Store
from tasks.journal import incident_lock
ctx = SimpleNamespace(settings=SimpleNamespace(home=Path(sys.argv[2])), store=Store(sys.argv[1]), flow_run_id="run-1")
with incident_lock(ctx, int(sys.argv[3])):
    print("locked", flush=True)
    time.sleep(120)
"""


def _incident(store: Store) -> int:
    verdict = Verdict(cause=Cause.GPU_HARDWARE, signature="xid-79", confidence=0.9)
    row, _ = r.create_job_incident(store, cluster="c", job_id="42", end_time=datetime(2025, 3, 1, tzinfo=timezone.utc),
                                   verdict=verdict)
    r.set_incident_status(store, row.id, "acting")
    return row.id


def _wait_state(locks, incident_id: int, want: str, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    state = locks.state(incident_id)
    while state != want and time.monotonic() < deadline:
        time.sleep(0.1)  # PostgreSQL ends a dead client's session when it reads the closed socket
        state = locks.state(incident_id)
    return state


def test_a_held_incident_is_busy_for_others_and_free_after_its_holder_is_killed(
    any_store: Store, store_url: str, tmp_path: Path
) -> None:
    from deployments.reconcile import read_incidents

    incident_id = _incident(any_store)
    home = tmp_path / "home-a"
    locks = incident_locks(any_store, home)
    assert isinstance(locks, AdvisoryLocks if store_url.startswith("postgresql") else FileLocks)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, store_url, str(home), str(incident_id)], cwd=REPO,
                              stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"locked"
        assert locks.state(incident_id) == "held"
        with pytest.raises(IncidentBusy, match=f"incident {incident_id} is being remediated"):
            with locks.hold(incident_id, "test-run"):
                pass
        assert locks.state(incident_id) == "held"  # neither the probe nor the refusal took it away
        since = datetime.now(timezone.utc) - timedelta(hours=1)
        [seen] = read_incidents(any_store, home, since)
        assert (seen.id, seen.lock) == (incident_id, "held")
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
    assert _wait_state(locks, incident_id, "free") == "free"
    with locks.hold(incident_id, "test-run"):  # and now it can be taken
        assert locks.state(incident_id) == "held"
    assert locks.state(incident_id) == "free"


def test_on_postgresql_another_home_sees_the_lock_and_another_database_does_not(postgres_url: str, tmp_path: Path) -> None:
    """Two workers share the database, not PITSTOP_HOME; a second database (another Pitstop
    installation on the same server) has its own incident 1."""
    from tests.store.conftest import fresh_database

    one, two = Store(postgres_url), None
    try:
        incident_id = _incident(one)
        with incident_locks(one, tmp_path / "worker-1").hold(incident_id, "run-1"):
            other_worker = incident_locks(Store(postgres_url), tmp_path / "worker-2")
            assert other_worker.state(incident_id) == "held"
            with pytest.raises(IncidentBusy):
                with other_worker.hold(incident_id, "run-2"):
                    pass
            with fresh_database() as elsewhere:
                two = Store(elsewhere)
                assert incident_locks(two, tmp_path / "other").state(incident_id) == "free"
                two.dispose()
        assert other_worker.state(incident_id) == "free"
    finally:
        one.dispose()


def test_the_lock_connection_names_its_holder_for_operators(postgres_url: str, tmp_path: Path) -> None:
    from sqlalchemy import text

    store = Store(postgres_url)
    try:
        incident_id = _incident(store)
        with incident_locks(store, tmp_path).hold(incident_id, "abc"):
            with store.engine.connect() as conn:
                names = list(conn.execute(text(
                    "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()")).scalars())
        assert f"pitstop incident {incident_id}: {this_host()} pid={os.getpid()} flow_run=abc"[:63] in names
    finally:
        store.dispose()
