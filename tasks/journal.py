"""The flows' view of the store: incidents, the action journal, tickets, mode, history.

A thin adapter over the store's tables (`pitstop.store.tables`): the flows call only these
functions, so the store's API can evolve in one place.

Idempotency:
  - one incident per (cluster, job id, end time) or per node-alarm key: duplicates find it;
  - each planned action is journaled (intent, then result) under (incident, seq); a re-run skips
    actions already in a final state;
  - while one process remediates an incident it holds an exclusive lock file; a duplicate run
    that finds it held leaves the incident alone, and a killed run releases it with its process.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from datetime import datetime

from pydantic import BaseModel

from pitstop.cluster.base import JobRecord
from pitstop.models import Verdict
from pitstop.policy.history import History
from pitstop.policy.safety import ModeState
from sqlalchemy.exc import IntegrityError
from sqlmodel import select

from pitstop.store.tables import ActionRecord, Incident, RuntimeSetting, Ticket, utcnow
from tasks.context import PipelineContext

# Journal states after which an action is never run again for the same incident.
FINAL_STATES = frozenset({"done", "failed", "skipped", "would_do", "denied"})


class IncidentHandle(BaseModel):
    id: int
    created: bool
    status: str
    decision: dict | None = None


class IncidentBusy(RuntimeError):
    """Another live run is remediating this incident right now."""


@contextlib.contextmanager
def incident_lock(ctx: PipelineContext, incident_id: int) -> Iterator[None]:
    lock_dir = ctx.settings.home / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    path = lock_dir / f"incident-{incident_id}.lock"
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise IncidentBusy(f"incident {incident_id} is being remediated by another run") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.uname().nodename} pid={os.getpid()} flow_run={ctx.flow_run_id}\n")
        handle.flush()
        try:
            yield None
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class JournalEntry(BaseModel):
    seq: int
    kind: str
    target: str
    state: str
    result: str | None = None
    params: dict = {}
    details: dict = {}


class TicketResult(BaseModel):
    ok: bool
    summary: str
    ticket_id: int | None = None


def _open(ctx: PipelineContext, key: str, **fields) -> IncidentHandle:
    """Create the incident for `key`, or find it: the unique key makes concurrent duplicates safe."""
    with ctx.store.session() as session:
        found = session.exec(select(Incident).where(Incident.idem_key == key)).first()
        if found is None:
            row = Incident(idem_key=key, cluster=ctx.cluster_name, cause="unknown", signature="pending",
                           flow_run_id=ctx.flow_run_id, **fields)
            session.add(row)
            try:
                session.commit()
                return IncidentHandle(id=row.id, created=True, status=row.status)
            except IntegrityError:
                session.rollback()
                found = session.exec(select(Incident).where(Incident.idem_key == key)).first()
        return IncidentHandle(id=found.id, created=False, status=found.status, decision=found.decision)


def job_incident_key(cluster: str, job: JobRecord) -> str:
    end = job.end_time.isoformat() if job.end_time else "no-end-time"
    return f"job:{cluster}:{job.job_id}:{end}"


def open_job_incident(ctx: PipelineContext, job: JobRecord) -> IncidentHandle:
    return _open(ctx, job_incident_key(ctx.cluster_name, job), kind="job", job_id=job.job_id,
                 nodes=list(job.nodes), end_time=job.end_time)


def open_node_incident(ctx: PipelineContext, node: str, alarm_key: str) -> IncidentHandle:
    return _open(ctx, f"node:{ctx.cluster_name}:{node}:{alarm_key}", kind="node", node=node, nodes=[node])


def update_incident(ctx: PipelineContext, incident_id: int, **fields) -> None:
    with ctx.store.session() as session:
        row = session.get(Incident, incident_id)
        for name, value in fields.items():
            setattr(row, name, value)
        row.updated_at = utcnow()
        session.add(row)
        session.commit()


def save_verdict(ctx: PipelineContext, incident_id: int, verdict: Verdict) -> None:
    update_incident(ctx, incident_id, cause=verdict.cause.value, signature=verdict.signature,
                    confidence=verdict.confidence,
                    evidence=[e.model_dump(mode="json") for e in verdict.evidence],
                    flow_run_id=ctx.flow_run_id)


def action_entry(ctx: PipelineContext, incident_id: int, seq: int) -> JournalEntry | None:
    with ctx.store.session() as session:
        row = session.exec(select(ActionRecord).where(
            ActionRecord.incident_id == incident_id, ActionRecord.seq == seq)).first()
        if row is None:
            return None
        params = dict(row.params or {})
        return JournalEntry(seq=row.seq, kind=row.kind, target=row.target, state=row.state,
                            result=row.result, params=params, details=params.get("result_details", {}))


def actions(ctx: PipelineContext, incident_id: int) -> list[JournalEntry]:
    with ctx.store.session() as session:
        rows = session.exec(select(ActionRecord).where(ActionRecord.incident_id == incident_id)
                            .order_by(ActionRecord.seq)).all()
    return [JournalEntry(seq=r.seq, kind=r.kind, target=r.target, state=r.state, result=r.result,
                         params=dict(r.params or {})) for r in rows]


def record_intent(ctx: PipelineContext, incident_id: int, action, state: str, params: dict) -> None:
    """Write (or move) the journal row for this action before anything is done."""
    with ctx.store.session() as session:
        row = session.exec(select(ActionRecord).where(
            ActionRecord.incident_id == incident_id, ActionRecord.seq == action.seq)).first()
        if row is None:
            row = ActionRecord(incident_id=incident_id, seq=action.seq, kind=action.kind.value,
                               target=action.target, params=params,
                               explanation=action.describe())
        row.state = state
        if state == "running":
            row.started_at = utcnow()
            row.params = {**(row.params or {}), **params}
        session.add(row)
        session.commit()


def record_result(ctx: PipelineContext, incident_id: int, seq: int, state: str, result: str,
                  details: dict | None = None) -> None:
    with ctx.store.session() as session:
        row = session.exec(select(ActionRecord).where(
            ActionRecord.incident_id == incident_id, ActionRecord.seq == seq)).one()
        row.state, row.result, row.finished_at = state, result, utcnow()
        if details:
            row.params = {**(row.params or {}), "result_details": details}
        session.add(row)
        session.commit()


def create_ticket(ctx: PipelineContext, incident_id: int, node: str, **fields) -> int:
    with ctx.store.session() as session:
        found = session.exec(select(Ticket).where(Ticket.incident_id == incident_id, Ticket.node == node)).first()
        if found is not None:
            return found.id
        row = Ticket(cluster=ctx.cluster_name, node=node, incident_id=incident_id, **fields)
        session.add(row)
        session.commit()
        return row.id


def update_ticket(ctx: PipelineContext, ticket_id: int, **fields) -> None:
    with ctx.store.session() as session:
        row = session.get(Ticket, ticket_id)
        for name, value in fields.items():
            setattr(row, name, value)
        row.updated_at = utcnow()
        session.add(row)
        session.commit()


def mode_state(ctx: PipelineContext) -> ModeState:
    """The run-time mode (`pitstop mode`) if one is set, else the settings' mode and canary lists."""
    base = ModeState(mode=ctx.settings.mode, canary_partitions=list(ctx.settings.policy.canary_partitions),
                     canary_nodes=list(ctx.settings.policy.canary_nodes))
    with ctx.store.session() as session:
        row = session.get(RuntimeSetting, "mode")
    if row is None or not row.value:
        return base
    try:
        return ModeState.model_validate({**base.model_dump(), **row.value})
    except ValueError:
        return base  # a bad runtime value must not stop remediation: the settings default holds


def load_history(ctx: PipelineContext, verdict: Verdict, job: JobRecord | None, nodes: list[str]) -> History:
    """History for the policy; the store engineer's loader when present, else what we can count."""
    try:
        from pitstop.store import records  # the store engineer's repository functions
    except ImportError:
        records = None
    loader = getattr(records, "load_history", None) if records else None
    if loader is not None:
        try:
            return loader(ctx.store, cluster=ctx.cluster_name, verdict=verdict, job=job, nodes=nodes)
        except TypeError:
            pass
    same = 0
    if job is not None:
        with ctx.store.session() as session:
            rows = session.exec(select(Incident).where(
                Incident.cluster == ctx.cluster_name, Incident.job_id == job.job_id,
                Incident.signature == verdict.signature)).all()
            same = max(0, len(rows) - 1)  # minus this incident
    return History(job_same_failures=same)


def incident_decision(ctx: PipelineContext, incident_id: int) -> dict | None:
    with ctx.store.session() as session:
        row = session.get(Incident, incident_id)
        return row.decision if row is not None else None


def finish_notifications(ctx: PipelineContext, incident_id: int, deliveries) -> None:
    """Journal rows for notify_* actions become done (or failed) once the message went out."""
    ok = any(d.status in {"sent", "skipped", "NotifyStatus.SENT"} or d.status.lower().startswith("sent") for d in deliveries)
    summary = "; ".join(f"{d.audience}: {d.summary}" for d in deliveries)
    for entry in actions(ctx, incident_id):
        if entry.kind in {"notify_ops", "notify_user"} and entry.state == "intended":
            record_result(ctx, incident_id, entry.seq, "done" if ok else "failed", summary)


def settle_notify_lines(lines, deliveries) -> None:
    """Report lines for notify_* actions show how the notification went."""
    ok = any(str(d.status) in {"sent", "skipped"} for d in deliveries)
    for line in lines:
        if line.kind in {"notify_ops", "notify_user"} and line.state == "intended":
            line.state = "done" if ok else "failed"
