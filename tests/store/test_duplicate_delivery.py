"""A duplicate delivery a moment late must not remediate twice.

Two runs of one event: run A opens the incident and remediates under its lock; run B opened the
same incident while A was still acting, then took the lock just after A released it. The status
B read before the lock is stale; the one read under the lock says done. (Seen in CI under load: B
remediated again and paused for an approval nobody would give.)
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from pitstop.cluster.base import JobRecord
from pitstop.store import Store
from pitstop.store import records as r
from tasks import journal

END = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)


def _ctx(store: Store, home: Path, run: str, job: JobRecord) -> SimpleNamespace:
    scheduler = SimpleNamespace(job=lambda job_id: job)  # the scheduler's record of the failed job
    return SimpleNamespace(settings=SimpleNamespace(home=home), store=store, flow_run_id=run,
                           cluster_name="c", scheduler=scheduler)


def test_the_status_is_read_under_the_lock(any_store: Store, tmp_path: Path) -> None:
    job = JobRecord(job_id="42", state="FAILED", nodes=["n1"], end_time=END)
    ctx = _ctx(any_store, tmp_path, "run-a", job)
    handle = journal.open_job_incident(ctx, job)
    with journal.incident_lock(ctx, handle.id) as status:
        assert status == handle.status != "done"
        journal.set_status(ctx, handle.id, "done")
    with journal.incident_lock(_ctx(any_store, tmp_path, "run-b", job), handle.id) as status:
        assert status == "done"
    bare = SimpleNamespace(settings=SimpleNamespace(home=tmp_path), flow_run_id="run-c")  # no store
    with journal.incident_lock(bare, 7) as status:
        assert status is None


@pytest.mark.parametrize("flow", ["post_failure", "node_alarm"])
def test_a_late_duplicate_finds_the_incident_done_and_does_nothing(
    flow: str, any_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows import node_alarm, post_failure

    job = JobRecord(job_id="42", state="FAILED", nodes=["n1"], end_time=END)
    ctx = _ctx(any_store, tmp_path, "run-b", job)
    opened = (journal.open_job_incident(ctx, job) if flow == "post_failure"
              else journal.open_node_incident(ctx, "n1", "xid-79"))
    stale = opened.model_copy()  # what run B read while run A was still acting
    journal.set_status(ctx, opened.id, "done")  # run A finishes and releases the lock
    monkeypatch.setattr(journal, "open_job_incident", lambda *a, **k: stale)
    monkeypatch.setattr(journal, "open_node_incident", lambda *a, **k: stale)

    def remediates_again(*a, **k):
        raise AssertionError("a done incident was remediated again")

    log = logging.getLogger("test")
    if flow == "post_failure":
        monkeypatch.setattr(post_failure, "_remediate", remediates_again)
        report = post_failure._post_failure(ctx, log, "42", None)
    else:
        monkeypatch.setattr(node_alarm, "gather_node_evidence", remediates_again)
        report = node_alarm._node_alarm(ctx, log, "n1", "xid-79", node_alarm.AlarmDetails(key="xid-79"))
    assert (report.incident_id, report.status) == (opened.id, "duplicate")
    assert r.get_incident(any_store, opened.id).status == "done"
