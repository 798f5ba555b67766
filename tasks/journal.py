"""The flows' view of the store: a thin adapter over `pitstop.store.records`.

The repository functions in `records` own the rules (idempotent incidents, compare-and-set
action journal, tickets, breakers, mode, history); this module only adapts them to the flows'
types (PipelineContext, JobRecord, PlannedAction) and adds the per-incident lock.

Idempotency:
  - one incident per (cluster, job id, end time) or per node-alarm key: duplicates find it;
  - every planned action is journaled as intent before any runs; each then moves
    intended -> running -> done/failed/skipped (compare-and-set: a finished row never changes),
    so a re-run skips what finished before a crash;
  - while one process remediates an incident it holds the incident lock (pitstop.store.locks:
    an advisory lock on PostgreSQL, seen by every host; a lock file on SQLite); a duplicate run
    that finds it held leaves the incident alone, and a killed run releases it with its process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta, timezone

from pydantic import BaseModel, Field
from sqlalchemy import update
from sqlmodel import select

from pitstop.cluster.base import ClusterError, JobRecord, NodeInfo
from pitstop.events.models import JobEnded
from pitstop.models import Cause, Verdict
from pitstop.policy.history import History
from pitstop.policy.safety import ModeState, drain_owner
from pitstop.store import locks, records
from pitstop.store.locks import incident_locks
from pitstop.store.tables import ActionRecord, Incident, utcnow
from tasks.context import PipelineContext

# Journal states after which an action is never run again for the same incident.
FINAL_STATES = frozenset(s.value for s in records.FINISHED)

# Placeholder verdict of an incident opened before its evidence is classified.
PENDING_VERDICT = Verdict(cause=Cause.UNKNOWN, signature="pending", confidence=0.0)


class IncidentHandle(BaseModel):
    id: int
    created: bool
    status: str
    decision: dict | None = None


# What a busy incident_lock raises; the flows catch it as journal.IncidentBusy.
IncidentBusy = locks.IncidentBusy


@contextlib.contextmanager
def incident_lock(ctx: PipelineContext, incident_id: int) -> Iterator[str | None]:
    """Held while this run remediates the incident; IncidentBusy at once if another run has it.
    Yields the incident's status read under the lock (None without a store): the one its caller
    read before may be stale, since a run that held the lock a moment ago may have finished it (a
    duplicate delivery a little late must not remediate twice). A context without a store (a bare
    one in tests) takes the file lock under settings.home."""
    store = getattr(ctx, "store", None)
    with incident_locks(store, ctx.settings.home).hold(incident_id, ctx.flow_run_id):
        yield records.get_incident(store, incident_id).status if store is not None else None


class JournalEntry(BaseModel):
    seq: int
    kind: str
    target: str
    state: str
    result: str | None = None
    params: dict = Field(default_factory=dict)
    details: dict = Field(default_factory=dict)


class TicketResult(BaseModel):
    ok: bool
    summary: str
    ticket_id: int | None = None


def _handle(row: Incident, created: bool) -> IncidentHandle:
    return IncidentHandle(id=row.id, created=created, status=row.status, decision=row.decision)


def _parse_time(value) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def incident_end_time(job: JobRecord, event: JobEnded | None) -> datetime | None:
    """The end time that names this failure. The event's own (from the epilog) wins: after
    Pitstop requeues the job, the scheduler shows the *next* run's times, and a duplicate
    delivery of the same event must still find the same incident."""
    return (event.end_time if event is not None else None) or job.end_time


def open_job_incident(ctx: PipelineContext, job: JobRecord, event: JobEnded | None = None) -> IncidentHandle:
    row, created = records.create_job_incident(
        ctx.store, cluster=ctx.cluster_name, job_id=job.job_id, end_time=incident_end_time(job, event),
        verdict=PENDING_VERDICT, nodes=job.nodes, flow_run_id=ctx.flow_run_id,
    )
    return _handle(row, created)


# A node's alarms within this window of an unfinished incident of that node join it: the hourly
# sweep that finds Xid 48 and Xid 63 on one node asks one question, not one per Xid.
NODE_FAULT_WINDOW = timedelta(hours=1)


def open_node_incident(ctx: PipelineContext, node: str, alarm_key: str) -> IncidentHandle:
    since = datetime.now(timezone.utc) - NODE_FAULT_WINDOW
    joined = records.open_node_incident_since(ctx.store, cluster=ctx.cluster_name, node=node, since=since)
    if joined is not None and joined.idem_key != records.node_incident_key(ctx.cluster_name, node, alarm_key):
        return _handle(joined, False)
    row, created = records.create_node_incident(
        ctx.store, cluster=ctx.cluster_name, node=node, alarm_id=alarm_key, verdict=PENDING_VERDICT,
        flow_run_id=ctx.flow_run_id,
    )
    return _handle(row, created)


def save_verdict(ctx: PipelineContext, incident_id: int, verdict: Verdict) -> None:
    # records has no "reclassify" call: the verdict columns are the flow's to fill once known.
    with ctx.store.session() as session:
        session.exec(update(Incident).where(Incident.id == incident_id).values(
            cause=verdict.cause.value, signature=verdict.signature, confidence=verdict.confidence,
            evidence=[e.model_dump(mode="json") for e in verdict.evidence],
            flow_run_id=ctx.flow_run_id, updated_at=utcnow()))
        session.commit()


def save_decision(ctx: PipelineContext, incident_id: int, decision) -> None:
    records.save_decision(ctx.store, incident_id, decision.model_dump(mode="json"), status="acting")


def set_status(ctx: PipelineContext, incident_id: int, status: str) -> None:
    records.set_incident_status(ctx.store, incident_id, status)


def incident_decision(ctx: PipelineContext, incident_id: int) -> dict | None:
    return records.get_incident(ctx.store, incident_id).decision


# --- the action journal ---------------------------------------------------------------------


def plan(ctx: PipelineContext, incident_id: int, actions: Iterable) -> None:
    """Intent for every action, before any runs (a re-plan keeps existing rows)."""
    records.plan_actions(ctx.store, incident_id, actions)


def _entry(row: ActionRecord) -> JournalEntry:
    params = dict(row.params or {})
    return JournalEntry(seq=row.seq, kind=row.kind, target=row.target, state=row.state, result=row.result,
                        params=params, details=params.get("result_details", {}))


def entries(ctx: PipelineContext, incident_id: int) -> list[JournalEntry]:
    return [_entry(r) for r in records.journal(ctx.store, incident_id)]


def action_entry(ctx: PipelineContext, incident_id: int, seq: int) -> JournalEntry | None:
    return next((e for e in entries(ctx, incident_id) if e.seq == seq), None)


def _merge_params(ctx: PipelineContext, incident_id: int, seq: int, extra: dict, keep_existing: bool = False) -> None:
    with ctx.store.session() as session:
        row = session.exec(
            select(ActionRecord).where(ActionRecord.incident_id == incident_id, ActionRecord.seq == seq)
        ).first()
        if row is None:
            return
        row.params = {**extra, **(row.params or {})} if keep_existing else {**(row.params or {}), **extra}
        session.add(row)
        session.commit()


def start(ctx: PipelineContext, incident_id: int, seq: int, intent_params: dict) -> bool:
    """Remember what a re-run needs to tell whether the action happened, then claim it.
    What the first attempt remembered wins (e.g. the restart count before the first requeue)."""
    if intent_params:
        _merge_params(ctx, incident_id, seq, intent_params, keep_existing=True)
    return records.start_action(ctx.store, incident_id, seq)


def finish(ctx: PipelineContext, incident_id: int, seq: int, state: str, result: str,
           details: dict | None = None) -> bool:
    if details:
        _merge_params(ctx, incident_id, seq, {"result_details": details})
    return records.finish_action(ctx.store, incident_id, seq, state, result)


def resolve_approval(ctx: PipelineContext, incident_id: int, seq: int, approved: bool, comment: str,
                     by: str | None = None) -> bool:
    return records.resolve_approval(ctx.store, incident_id, seq, approved, comment, by=by)


def note_question(ctx: PipelineContext, incident_id: int, seq: int, facts: dict) -> None:
    """What was asked about this step and how the question went out (params["approval"]):
    `pitstop approvals` and `pitstop incidents --explain` read it; a re-run keeps its deadline."""
    current = (action_entry(ctx, incident_id, seq) or JournalEntry(seq=seq, kind="", target="", state="")).params
    _merge_params(ctx, incident_id, seq, {"approval": {**(current.get("approval") or {}), **facts}})


def question_of(ctx: PipelineContext, incident_id: int, seq: int) -> dict:
    entry = action_entry(ctx, incident_id, seq)
    return dict((entry.params.get("approval") if entry else None) or {})


def open_incidents_of_run(ctx: PipelineContext, flow_run_id: str) -> list[int]:
    """Incidents this flow run was handling and did not finish (for its cancellation hook)."""
    with ctx.store.session() as session:
        rows = session.exec(select(Incident).where(Incident.flow_run_id == str(flow_run_id), Incident.status != "done"))
        return [r.id for r in rows]


# notify action -> the audience whose delivery settles it
NOTIFY_AUDIENCE = {"notify_ops": "ops", "notify_user": "user"}


def _settled(kind: str, deliveries) -> tuple[str, str]:
    """(state, summary) of one notify action from its own audience's delivery: a user nobody
    could write to was not told, whatever happened to the ops mail."""
    audience = NOTIFY_AUDIENCE[kind]
    mine = [d for d in deliveries if d.audience == audience]
    if not mine:
        return "skipped", f"not sent: no address for the {audience} (pipeline.user_notify_url)"
    ok = any(_delivered(d) for d in mine)
    return ("done" if ok else "failed"), "; ".join(f"{d.audience}: {d.summary}" for d in mine)


def finish_notifications(ctx: PipelineContext, incident_id: int, deliveries) -> None:
    """Journal rows for notify_* actions become done / failed / skipped once the messages went out."""
    for entry in entries(ctx, incident_id):
        if entry.kind in NOTIFY_AUDIENCE and entry.state in {"intended", "running"}:
            state, summary = _settled(entry.kind, deliveries)
            records.finish_action(ctx.store, incident_id, entry.seq, state, summary)


def _delivered(delivery) -> bool:
    return str(delivery.status).lower().rsplit(".", 1)[-1] in {"sent", "skipped"}


delivered = _delivered  # for the approval question's own delivery check (tasks.remediate)


def settle_notify_lines(lines, deliveries) -> None:
    """Report lines for notify_* actions show how their own notification went."""
    for line in lines:
        if line.kind in NOTIFY_AUDIENCE and line.state == "intended":
            line.state, detail = _settled(line.kind, deliveries)
            if line.state == "skipped":
                line.detail = detail


# --- tickets, nodes, breakers ---------------------------------------------------------------


class TicketHandle(BaseModel):
    id: int
    status: str = Field(description="approved | sending (a send began and its answer was never "
                        "recorded) | sent | send_failed")
    incident_key: str = Field(description="the incident's idempotency key (job:<cluster>:<job>:<end>...)")


def create_ticket(ctx: PipelineContext, incident_id: int, node: str, **fields) -> TicketHandle:
    """The one ticket of (incident, node): made now, or the one an earlier run made."""
    row, _ = records.create_ticket(
        ctx.store, records.TicketDraft(cluster=ctx.cluster_name, node=node, incident_id=incident_id, **fields))
    return TicketHandle(id=row.id, status=row.status, incident_key=records.get_incident(ctx.store, incident_id).idem_key)


def update_ticket(ctx: PipelineContext, ticket_id: int, status: str, sink_result: str | None = None) -> None:
    records.update_ticket(ctx.store, ticket_id, status, sink_result)


def ticket_delivered(ctx: PipelineContext, incident_id: int, node: str) -> bool:
    """After a crash mid-ticket: did its sink answer (or was none needed)? If not, it is sent
    again with the same ticket key (tasks/tickets.py), which a sink uses to keep one ticket:
    that beats a vendor never hearing of it."""
    ticket = next((t for t in records.tickets_for(ctx.store, ctx.cluster_name, node) if t.incident_id == incident_id), None)
    return ticket is not None and ticket.sink_result is not None and ticket.status in {"sent", "approved"}


def record_decision_effects(ctx: PipelineContext, incident_id: int, decision) -> None:
    """Breakers the decision opened, ladder rungs and lemon flags it found: into the store."""
    for trip in decision.breaker_trips:
        records.open_breaker(ctx.store, trip.scope, trip.reason)
    for node in decision.foreign_drains:
        record_node(ctx, node, incident_id)  # `pitstop nodes` shows whose drain it is
    if decision.dry_run:
        return
    for node, pos in decision.ladder.items():
        records.set_node_ladder(ctx.store, ctx.cluster_name, node, pos.ladder, pos.rung, incident_id)
    for node, why in decision.lemon.items():
        records.set_node_lemon(ctx.store, ctx.cluster_name, node, why)


def record_rung(ctx: PipelineContext, node: str, ladder: str, rung: int, incident_id: int) -> None:
    """The ladder rung an escalation reached inside an incident."""
    records.set_node_ladder(ctx.store, ctx.cluster_name, node, ladder, rung, incident_id)


def record_node(ctx: PipelineContext, node: str, incident_id: int | None = None) -> None:
    """The node's state as the scheduler shows it now (after Pitstop changed it)."""
    try:
        info: NodeInfo = ctx.scheduler.node(node)
    except (ClusterError, ValueError):
        return
    reason = info.reason or None
    owner = drain_owner(info).value  # the same ownership test every decision uses
    state = "+".join([info.state, *info.flags])
    records.record_node_state(ctx.store, ctx.cluster_name, node, state=state, reason=reason, owner=owner,
                              incident_id=incident_id)


# --- mode and history -----------------------------------------------------------------------


def mode_state(ctx: PipelineContext) -> ModeState:
    """The run-time mode (`pitstop mode`) if one is set, else the settings' mode and canary lists."""
    policy = ctx.settings.policy
    setting = records.get_mode(ctx.store, default=ctx.settings.mode,
                               default_canary_partitions=list(policy.canary_partitions),
                               default_canary_nodes=list(policy.canary_nodes))
    return ModeState(mode=setting.mode, canary_partitions=setting.canary_partitions,
                     canary_nodes=setting.canary_nodes)


def load_history(ctx: PipelineContext, incident_id: int, verdict: Verdict, job: JobRecord | None,
                 nodes: list[str], cluster_nodes: list[NodeInfo], recent_minutes: float = 60.0) -> History:
    return records.load_history(
        ctx.store, cluster=ctx.cluster_name, now=datetime.now(timezone.utc), signature=verdict.signature,
        job_id=job.job_id if job else None, nodes=nodes, cluster_nodes=cluster_nodes,
        exclude_incident_id=incident_id, recent_window=timedelta(minutes=recent_minutes),
    )


def join_switch_incident(ctx: PipelineContext, incident_id: int, storm, window_minutes: float) -> tuple[int, bool]:
    """(the switch's fabric incident, whether this incident opened it); see records."""
    return records.join_switch_incident(
        ctx.store, cluster=ctx.cluster_name, switch=storm.switch, members=storm.members, first_at=storm.first_at,
        window=timedelta(minutes=window_minutes), incident_id=incident_id, now=datetime.now(timezone.utc))


# --- health sweeps --------------------------------------------------------------------------


def record_checks(ctx: PipelineContext, results: list[tuple[str, str, str]]) -> None:
    """One `check` node event per (node, overall, summary): the sweep history."""
    from pitstop.store.tables import NodeEvent

    with ctx.store.session() as session:
        for node, overall, summary in results:
            session.add(NodeEvent(cluster=ctx.cluster_name, node=node, kind="check", state=overall, detail=summary[:500]))
        session.commit()


def check_failures_since(ctx: PipelineContext, node: str, since: datetime) -> int:
    from sqlalchemy import func

    from pitstop.store.tables import NodeEvent

    with ctx.store.session() as session:
        return session.exec(select(func.count()).select_from(NodeEvent).where(
            NodeEvent.cluster == ctx.cluster_name, NodeEvent.node == node, NodeEvent.kind == "check",
            NodeEvent.state == "FAIL", NodeEvent.at >= since)).one()


def flag_repeat_offender(ctx: PipelineContext, node: str, why: str) -> None:
    """Mark the node (`pitstop nodes` shows it); keeps reasons the lemon detector gave."""
    current = next((r for r in records.list_nodes(ctx.store, ctx.cluster_name) if r.name == node), None)
    reasons = [r for r in (current.lemon_reasons if current else []) if not r.startswith("failed ")]
    records.set_node_lemon(ctx.store, ctx.cluster_name, node, reasons + [why])
