"""Repository functions for remediation records. Every write is idempotent or compare-and-set.

Flow usage, in order:
    inc, created = create_job_incident(store, cluster=..., job_id=..., end_time=..., verdict=...)
    if not created and inc.status == "done": return          # duplicate event: nothing to do
    history = load_history(store, ...)                        # -> pitstop.policy.History
    decision = decide(...); save_decision(store, inc.id, decision.model_dump(mode="json"))
    journal = plan_actions(store, inc.id, decision.actions)   # intent, before anything runs
    for rec in actions_to_run(store, inc.id):                 # skips what finished before a crash
        if start_action(store, inc.id, rec.seq): ...do it...; finish_action(store, inc.id, rec.seq, "done", "...")
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import delete, func, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from pitstop.config import Mode
from pitstop.models import Cause, Verdict
from pitstop.store.db import Store
from pitstop.store.tables import (
    ActionRecord,
    Breaker,
    Incident,
    NodeEvent,
    NodeRecord,
    RuntimeSetting,
    Ticket,
    XidEvent,
    XidWatermark,
)


class RecordError(RuntimeError):
    """A record operation that cannot proceed; the message says which record and why."""


def _utc(dt: datetime | None) -> datetime | None:
    """Stored form: aware UTC (SQLModel's UTCDateTime refuses naive values; naive = UTC)."""
    if dt is None:
        return None
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


def _now(now: datetime | None) -> datetime:
    return _utc(now or datetime.now(timezone.utc))


# --- incidents ------------------------------------------------------------------------------


def job_incident_key(cluster: str, job_id: str, end_time: datetime | None) -> str:
    end = _utc(end_time).isoformat() if end_time else "unknown-end"
    return f"job:{cluster}:{job_id}:{end}"


def node_incident_key(cluster: str, node: str, alarm_id: str) -> str:
    """`alarm_id` identifies the alarm, e.g. the event id or `xid-79@boot:ts`."""
    return f"node:{cluster}:{node}:{alarm_id}"


def _create_incident(store: Store, row: Incident) -> tuple[Incident, bool]:
    with store.session() as s:
        s.add(row)
        try:
            s.commit()
            s.refresh(row)
            return row, True
        except IntegrityError:
            s.rollback()
    with store.session() as s:
        existing = s.exec(select(Incident).where(Incident.idem_key == row.idem_key)).first()
        if existing is None and row.kind == "job":
            existing = s.exec(
                select(Incident).where(
                    Incident.cluster == row.cluster,
                    Incident.job_id == row.job_id,
                    Incident.end_time == row.end_time,
                )
            ).first()
        if existing is None:
            raise RecordError(f"incident {row.idem_key} could not be created nor found")
        return existing, False


def _verdict_fields(verdict: Verdict) -> dict[str, Any]:
    return {
        "cause": verdict.cause.value,
        "signature": verdict.signature,
        "confidence": verdict.confidence,
        "evidence": [e.model_dump() for e in verdict.evidence],
    }


def create_job_incident(
    store: Store,
    *,
    cluster: str,
    job_id: str,
    end_time: datetime | None,
    verdict: Verdict,
    nodes: Iterable[str] = (),
    flow_run_id: str | None = None,
) -> tuple[Incident, bool]:
    """One incident per (cluster, job id, end time). Returns (incident, created_now).

    A duplicate event gets the existing incident and `created_now=False`; safe under races.
    """
    row = Incident(
        idem_key=job_incident_key(cluster, job_id, end_time),
        cluster=cluster,
        kind="job",
        job_id=job_id,
        nodes=list(nodes),
        end_time=_utc(end_time),
        flow_run_id=flow_run_id,
        **_verdict_fields(verdict),
    )
    return _create_incident(store, row)


def create_node_incident(
    store: Store,
    *,
    cluster: str,
    node: str,
    alarm_id: str,
    verdict: Verdict,
    flow_run_id: str | None = None,
) -> tuple[Incident, bool]:
    """One incident per (cluster, node, alarm id). Returns (incident, created_now)."""
    row = Incident(
        idem_key=node_incident_key(cluster, node, alarm_id),
        cluster=cluster,
        kind="node",
        node=node,
        nodes=[node],
        flow_run_id=flow_run_id,
        **_verdict_fields(verdict),
    )
    return _create_incident(store, row)


def join_switch_incident(
    store: Store,
    *,
    cluster: str,
    switch: str,
    members: list[str],
    first_at: datetime,
    window: timedelta,
    incident_id: int,
    now: datetime,
) -> tuple[int, bool]:
    """The leaf switch's fabric incident: the one still in its storm (a member joined within
    `window`), else a new one. Returns (its id, whether this call opened it).

    Concurrent flows of one burst may each open one; the lowest id is the switch's incident and
    the others merge into it (an insert is committed before the look-up that decides), so exactly
    one flow tells ops. Its status is `done` from the start: Pitstop's part (one notice, jobs kept
    off the switch) is done when the opener's flow sends it; the repair is the network team's."""

    def live(s) -> Incident | None:
        return s.exec(select(Incident).where(
            Incident.cluster == cluster, Incident.kind == "switch", Incident.node == switch,
            Incident.updated_at >= _utc(now - window), col(Incident.decision).is_not(None))
            .order_by(col(Incident.id)).limit(1)).first()

    with store.session() as s:
        found = live(s)
        if found is None:
            row = Incident(
                idem_key=f"switch:{cluster}:{switch}:{_utc(first_at).isoformat(timespec='seconds')}",
                cluster=cluster, kind="switch", node=switch, nodes=list(members), cause=Cause.NETWORK_FABRIC.value,
                signature="switch-storm", confidence=1.0, status="done",
                decision={"switch": switch, "opened_by_incident": incident_id, "first_at": _utc(first_at).isoformat()},
                created_at=_utc(now), updated_at=_utc(now),
            )
            s.add(row)
            mine = None
            try:
                s.commit()
                mine = row.id
            except IntegrityError:  # the same storm's key, inserted by another flow just now
                s.rollback()
            found = live(s)
            if found is None:
                raise RuntimeError(f"the fabric incident of switch {switch} vanished while it was opened")
            opened = mine is not None and found.id == mine
            if mine is not None and not opened:  # another flow's is older: ours was never seen
                s.exec(delete(Incident).where(Incident.id == mine))
        else:
            opened = False
        s.exec(update(Incident).where(Incident.id == found.id).values(updated_at=_utc(now)))
        s.commit()
        return found.id, opened


def open_node_incident_since(store: Store, *, cluster: str, node: str, since: datetime) -> Incident | None:
    """The oldest unfinished incident of this node opened since `since`: a second alarm for the
    node in the same fault window joins it (one question per node and window, not one per Xid)."""
    with store.session() as s:
        return s.exec(
            select(Incident).where(Incident.cluster == cluster, Incident.kind == "node", Incident.node == node,
                                   Incident.status != "done", Incident.created_at >= _utc(since))
            .order_by(col(Incident.id)).limit(1)
        ).first()


def get_incident(store: Store, incident_id: int) -> Incident:
    with store.session() as s:
        row = s.get(Incident, incident_id)
    if row is None:
        raise RecordError(f"no incident {incident_id} in {store.url}")
    return row


def save_decision(store: Store, incident_id: int, decision: dict, status: str | None = None) -> None:
    """Store the decision (as `Decision.model_dump(mode='json')`) on the incident."""
    values: dict[str, Any] = {"decision": decision, "updated_at": _now(None)}
    if status:
        values["status"] = status
    with store.session() as s:
        s.exec(update(Incident).where(Incident.id == incident_id).values(**values))
        s.commit()


def set_incident_status(store: Store, incident_id: int, status: str) -> None:
    with store.session() as s:
        s.exec(update(Incident).where(Incident.id == incident_id).values(status=status, updated_at=_now(None)))
        s.commit()


def recent_incidents(
    store: Store, cluster: str | None = None, since: datetime | None = None, limit: int = 50
) -> list[Incident]:
    q = select(Incident).order_by(col(Incident.created_at).desc(), col(Incident.id).desc()).limit(limit)
    if cluster:
        q = q.where(Incident.cluster == cluster)
    if since:
        q = q.where(Incident.created_at >= _utc(since))
    with store.session() as s:
        return list(s.exec(q))


# --- the action journal ---------------------------------------------------------------------


class ActionState(StrEnum):
    INTENDED = "intended"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"
    WOULD_DO = "would_do"
    AWAITING_APPROVAL = "awaiting_approval"
    DENIED = "denied"


FINISHED = frozenset({ActionState.DONE, ActionState.FAILED, ActionState.SKIPPED, ActionState.WOULD_DO, ActionState.DENIED})


class ActionIntent(BaseModel):
    """What the journal needs of a planned action (a `PlannedAction` converts with `intent_of`)."""

    seq: int = Field(ge=0)
    kind: str
    target: str
    params: dict = Field(default_factory=dict)
    state: ActionState = ActionState.INTENDED
    explanation: str = ""


def intent_of(planned: Any) -> ActionIntent:
    """Convert a `pitstop.policy.PlannedAction` (duck-typed: the store does not import policy)."""
    params = planned.model_dump(mode="json", exclude={"seq", "kind", "target"})
    return ActionIntent(
        seq=planned.seq,
        kind=str(planned.kind),
        target=planned.target,
        params=params,
        state=ActionState(planned.journal_state),
        explanation=planned.describe(),
    )


def plan_actions(store: Store, incident_id: int, actions: Iterable[Any]) -> list[ActionRecord]:
    """Record intent for every action before any runs. Re-planning keeps existing rows as they
    are (a re-run after a crash sees what already finished). Returns the journal in seq order."""
    intents = [a if isinstance(a, ActionIntent) else intent_of(a) for a in actions]
    for intent in intents:
        with store.session() as s:
            s.add(
                ActionRecord(
                    incident_id=incident_id,
                    seq=intent.seq,
                    kind=intent.kind,
                    target=intent.target,
                    params=intent.params,
                    state=intent.state.value,
                    explanation=intent.explanation,
                )
            )
            try:
                s.commit()
            except IntegrityError:
                s.rollback()  # already journalled by an earlier (or concurrent) run
    return journal(store, incident_id)


def journal(store: Store, incident_id: int) -> list[ActionRecord]:
    with store.session() as s:
        return list(s.exec(select(ActionRecord).where(ActionRecord.incident_id == incident_id).order_by(ActionRecord.seq)))


def actions_to_run(store: Store, incident_id: int) -> list[ActionRecord]:
    """Actions not finished: `intended`, `awaiting_approval`, and `running` (in doubt: the
    previous run died during it; every Pitstop action is safe to repeat, so it is re-run)."""
    todo = {ActionState.INTENDED, ActionState.RUNNING, ActionState.AWAITING_APPROVAL}
    return [r for r in journal(store, incident_id) if r.state in todo]


def _transition(store: Store, incident_id: int, seq: int, allowed_from: set[str], values: dict) -> bool:
    with store.session() as s:
        res = s.exec(
            update(ActionRecord)
            .where(ActionRecord.incident_id == incident_id, ActionRecord.seq == seq, col(ActionRecord.state).in_(allowed_from))
            .values(**values)
        )
        s.commit()
        return res.rowcount == 1


def start_action(store: Store, incident_id: int, seq: int, now: datetime | None = None) -> bool:
    """Claim an action (intended/running -> running). False: it finished already or is not due."""
    return _transition(
        store, incident_id, seq, {ActionState.INTENDED, ActionState.RUNNING},
        {"state": ActionState.RUNNING.value, "started_at": _now(now)},
    )


def resolve_approval(store: Store, incident_id: int, seq: int, approved: bool, comment: str = "", by: str | None = None) -> bool:
    """awaiting_approval -> intended (approved) or denied. False if it was not awaiting."""
    note = f"{'approved' if approved else 'denied'}" + (f" by {by}" if by else "") + (f": {comment}" if comment else "")
    values: dict[str, Any] = {"state": (ActionState.INTENDED if approved else ActionState.DENIED).value, "result": note}
    if not approved:
        values["finished_at"] = _now(None)
    return _transition(store, incident_id, seq, {ActionState.AWAITING_APPROVAL}, values)


def finish_action(
    store: Store, incident_id: int, seq: int, state: ActionState | str, result: str = "", now: datetime | None = None
) -> bool:
    """Record the outcome. Finished actions are never overwritten (returns False)."""
    state = ActionState(state)
    if state not in FINISHED:
        raise RecordError(f"finish_action needs a finished state, not {state.value!r}")
    unfinished = {ActionState.INTENDED, ActionState.RUNNING, ActionState.AWAITING_APPROVAL}
    return _transition(
        store, incident_id, seq, unfinished,
        {"state": state.value, "result": result[:4000], "finished_at": _now(now)},
    )


# --- nodes ----------------------------------------------------------------------------------


def _node_row(s, cluster: str, node: str) -> NodeRecord:
    row = s.exec(select(NodeRecord).where(NodeRecord.cluster == cluster, NodeRecord.name == node)).first()
    if row is None:
        row = NodeRecord(cluster=cluster, name=node)
        s.add(row)
        try:
            s.flush()
        except IntegrityError:
            s.rollback()
            row = s.exec(select(NodeRecord).where(NodeRecord.cluster == cluster, NodeRecord.name == node)).one()
    return row


def record_node_state(
    store: Store,
    cluster: str,
    node: str,
    *,
    state: str | None,
    reason: str | None = None,
    owner: str = "none",
    incident_id: int | None = None,
    now: datetime | None = None,
) -> bool:
    """Update a node's current state; appends a history event only when something changed."""
    with store.session() as s:
        row = _node_row(s, cluster, node)
        changed = (row.state, row.reason, row.drain_owner) != (state, reason, owner)
        if changed:
            row.state, row.reason, row.drain_owner = state, reason, owner
            row.updated_at = _now(now)
            if incident_id is not None:
                row.last_incident_id = incident_id
            s.add(NodeEvent(cluster=cluster, node=node, at=_now(now), kind="state", state=state,
                            detail=reason or "", incident_id=incident_id))
        s.commit()
        return changed


def set_node_ladder(store: Store, cluster: str, node: str, ladder: str, rung: int, incident_id: int | None = None, now: datetime | None = None) -> None:
    with store.session() as s:
        row = _node_row(s, cluster, node)
        if (row.ladder, row.ladder_rung) != (ladder, rung):
            s.add(NodeEvent(cluster=cluster, node=node, at=_now(now), kind="ladder",
                            detail=f"{ladder} rung {rung + 1}", incident_id=incident_id))
        row.ladder, row.ladder_rung, row.updated_at = ladder, rung, _now(now)
        if incident_id is not None:
            row.last_incident_id = incident_id
        s.commit()


def set_node_lemon(store: Store, cluster: str, node: str, reasons: list[str], now: datetime | None = None) -> None:
    """Flag (non-empty reasons) or clear (empty) the lemon mark."""
    with store.session() as s:
        row = _node_row(s, cluster, node)
        flag = bool(reasons)
        if row.lemon != flag:
            s.add(NodeEvent(cluster=cluster, node=node, at=_now(now), kind="lemon",
                            detail="; ".join(reasons) or "cleared"))
        row.lemon, row.lemon_reasons, row.updated_at = flag, list(reasons), _now(now)
        s.commit()


def _latest_straggler(s, cluster: str, node: str) -> NodeEvent | None:
    return s.exec(select(NodeEvent).where(NodeEvent.cluster == cluster, NodeEvent.node == node,
                                          NodeEvent.kind == "straggler")
                  .order_by(col(NodeEvent.at).desc(), col(NodeEvent.id).desc())).first()


def set_node_straggler(store: Store, cluster: str, node: str, why: str | None, key: str = "",
                       now: datetime | None = None) -> bool:
    """Flag a silent straggler (`why`; `key` names what was flagged, e.g. `3/pcie_width`) or clear
    it (None). A `straggler` node event (state `flagged:<key>` or `cleared`) is written only on a
    change; True when the node is newly flagged or flagged for something else (worth an alarm)."""
    with store.session() as s:
        last = _latest_straggler(s, cluster, node)
        was = last.state if last is not None and (last.state or "").startswith("flagged") else None
        if why is None:
            if was is not None:
                s.add(NodeEvent(cluster=cluster, node=node, at=_now(now), kind="straggler", state="cleared",
                                detail="no longer below the fleet"))
                s.commit()
            return False
        state = f"flagged:{key}"
        if was == state:
            return False
        _node_row(s, cluster, node).updated_at = _now(now)
        s.add(NodeEvent(cluster=cluster, node=node, at=_now(now), kind="straggler", state=state, detail=why))
        s.commit()
        return True


def node_stragglers(store: Store, cluster: str | None = None) -> dict[tuple[str, str], NodeEvent]:
    """(cluster, node) -> the `straggler` event of each node flagged now (its detail is the why)."""
    q = select(NodeEvent).where(NodeEvent.kind == "straggler").order_by(col(NodeEvent.at), col(NodeEvent.id))
    if cluster:
        q = q.where(NodeEvent.cluster == cluster)
    with store.session() as s:
        latest = {(e.cluster, e.node): e for e in s.exec(q)}
    return {k: e for k, e in latest.items() if (e.state or "").startswith("flagged")}


def list_nodes(store: Store, cluster: str | None = None) -> list[NodeRecord]:
    q = select(NodeRecord).order_by(NodeRecord.cluster, NodeRecord.name)
    if cluster:
        q = q.where(NodeRecord.cluster == cluster)
    with store.session() as s:
        return list(s.exec(q))


def node_events(store: Store, cluster: str, node: str, limit: int = 100) -> list[NodeEvent]:
    with store.session() as s:
        return list(s.exec(select(NodeEvent).where(NodeEvent.cluster == cluster, NodeEvent.node == node)
                           .order_by(col(NodeEvent.at).desc(), col(NodeEvent.id).desc()).limit(limit)))


# --- Xid watermark and counts ---------------------------------------------------------------


class XidObservation(BaseModel):
    """One Xid line from a node's kernel log (parsed by the node check / classifiers)."""

    xid: int = Field(ge=0)
    kernel_ts: float = Field(description="dmesg seconds since boot, e.g. 1234.567890")
    boot_id: str = Field(default="", description="/proc/sys/kernel/random/boot_id; '' if unknown")
    pci: str = ""
    line: str = ""


class XidCount(BaseModel):
    new: list[XidObservation] = Field(default_factory=list, description="counted for the first time")
    counts: dict[str, int] = Field(default_factory=dict, description="xid -> total ever counted")


def _insert_ignore(store: Store):
    """INSERT ... ON CONFLICT DO NOTHING for the store's dialect (SQLite or PostgreSQL)."""
    if store.engine.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert


def record_xids(
    store: Store, cluster: str, node: str, observations: Iterable[XidObservation], now: datetime | None = None
) -> XidCount:
    """Count Xid lines once, however often the same kernel log is rescanned.

    Lines at or below the node's watermark for the same boot are skipped; everything else goes
    through a unique key (boot, timestamp, xid, PCI), so a rescan without a boot id, or two
    sweeps racing, still counts each line once. A new boot id starts a new watermark.
    """
    obs = list(observations)
    for attempt in range(3):
        try:
            return _record_xids_once(store, cluster, node, obs, now)
        except IntegrityError:
            # another sweep created this node's watermark/record at the same moment: re-read
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _record_xids_once(
    store: Store, cluster: str, node: str, obs: list[XidObservation], now: datetime | None
) -> XidCount:
    new: list[XidObservation] = []
    with store.session() as s:
        row = _node_row(s, cluster, node)
        mark = s.exec(select(XidWatermark).where(XidWatermark.cluster == cluster, XidWatermark.node == node)).first()
        if mark is None:
            mark = XidWatermark(cluster=cluster, node=node)
            s.add(mark)
        insert = _insert_ignore(store)
        for o in obs:
            if mark.boot_id and o.boot_id == mark.boot_id and o.kernel_ts <= mark.kernel_ts:
                continue
            res = s.exec(insert(XidEvent).values(
                cluster=cluster, node=node, boot_id=o.boot_id, kernel_ts=o.kernel_ts, xid=o.xid,
                pci=o.pci, line=o.line[:1000], seen_at=_now(now)).on_conflict_do_nothing()
                .returning(XidEvent.id))
            # a returned row, not rowcount: an ORM-enabled insert on psycopg reports rowcount -1
            if res.first() is not None:
                new.append(o)  # else counted by an earlier scan
        latest_boot = next((o.boot_id for o in reversed(obs) if o.boot_id), "")
        if latest_boot:
            same = [o.kernel_ts for o in obs if o.boot_id == latest_boot]
            if latest_boot != mark.boot_id:
                mark.boot_id, mark.kernel_ts = latest_boot, max(same)
            else:
                mark.kernel_ts = max([mark.kernel_ts, *same])
            mark.updated_at = _now(now)
        s.flush()
        # Recount from the events (the truth), so concurrent sweeps never lose an update.
        counts = {
            str(xid): n
            for xid, n in s.exec(
                select(XidEvent.xid, func.count()).where(XidEvent.cluster == cluster, XidEvent.node == node)
                .group_by(XidEvent.xid)
            )
        }
        row.xid_counts = counts
        if new:
            s.add(NodeEvent(cluster=cluster, node=node, at=_now(now), kind="xid",
                            detail=", ".join(f"Xid {o.xid}" for o in new)[:500]))
        s.commit()
    return XidCount(new=new, counts=counts)


def xid_history(store: Store, cluster: str, node: str, since: datetime | None = None) -> list[XidEvent]:
    q = select(XidEvent).where(XidEvent.cluster == cluster, XidEvent.node == node).order_by(XidEvent.seen_at, XidEvent.kernel_ts)
    if since:
        q = q.where(XidEvent.seen_at >= _utc(since))
    with store.session() as s:
        return list(s.exec(q))


# --- tickets --------------------------------------------------------------------------------


class TicketDraft(BaseModel):
    cluster: str
    node: str
    incident_id: int | None = None
    gpu_serial: str | None = None
    gpu_uuid: str | None = None
    pci_bus: str | None = None
    xid_history: list[dict] = Field(default_factory=list)
    dcgm_results: dict = Field(default_factory=dict)
    evidence: list[dict] = Field(default_factory=list)
    status: str = "proposed"


def create_ticket(store: Store, draft: TicketDraft) -> tuple[Ticket, bool]:
    """One ticket per (incident, node). Returns (ticket, created_now)."""
    with store.session() as s:
        row = Ticket(**draft.model_dump())
        s.add(row)
        try:
            s.commit()
            s.refresh(row)
            return row, True
        except IntegrityError:
            s.rollback()
        existing = s.exec(select(Ticket).where(Ticket.incident_id == draft.incident_id, Ticket.node == draft.node)).first()
        if existing is None:
            raise RecordError(f"ticket for node {draft.node} incident {draft.incident_id} could not be created")
        return existing, False


def update_ticket(store: Store, ticket_id: int, status: str, sink_result: str | None = None) -> None:
    with store.session() as s:
        values: dict[str, Any] = {"status": status, "updated_at": _now(None)}
        if sink_result is not None:
            values["sink_result"] = sink_result[:4000]
        s.exec(update(Ticket).where(Ticket.id == ticket_id).values(**values))
        s.commit()


def tickets_for(store: Store, cluster: str, node: str | None = None) -> list[Ticket]:
    q = select(Ticket).where(Ticket.cluster == cluster).order_by(Ticket.created_at)
    if node:
        q = q.where(Ticket.node == node)
    with store.session() as s:
        return list(s.exec(q))


# --- circuit breakers -----------------------------------------------------------------------


def open_breaker(store: Store, scope: str, reason: str, now: datetime | None = None) -> bool:
    """Open (or keep open) a breaker. True when it was closed before (notify people then)."""
    with store.session() as s:
        row = s.get(Breaker, scope)
        if row is None:
            row = Breaker(scope=scope)
            s.add(row)
        was_closed = not row.is_open
        if was_closed:
            row.is_open, row.opened_at, row.reason = True, _now(now), reason
            row.reset_by = row.reset_at = row.reset_comment = None
        row.trips += 1
        try:
            s.commit()
        except IntegrityError:
            s.rollback()  # another flow opened it at the same moment
            return False
        return was_closed


def reset_breaker(store: Store, scope: str, by: str, comment: str = "", now: datetime | None = None) -> bool:
    """A human closes a breaker. False if it was not open."""
    with store.session() as s:
        row = s.get(Breaker, scope)
        if row is None or not row.is_open:
            return False
        row.is_open, row.reset_by, row.reset_at, row.reset_comment = False, by, _now(now), comment
        s.commit()
        return True


def breakers(store: Store) -> list[Breaker]:
    with store.session() as s:
        return list(s.exec(select(Breaker).order_by(Breaker.scope)))


def open_breakers(store: Store) -> dict[str, str]:
    """scope -> reason, the shape `History.open_breakers` takes."""
    return {b.scope: b.reason or "" for b in breakers(store) if b.is_open}


# --- run-time mode --------------------------------------------------------------------------

MODE_KEY = "mode"


class ModeSetting(BaseModel):
    mode: Mode
    canary_partitions: list[str] = Field(default_factory=list)
    canary_nodes: list[str] = Field(default_factory=list)
    updated_by: str | None = None
    updated_at: datetime | None = None


def set_mode(
    store: Store, mode: Mode | str, *, by: str | None = None,
    canary_partitions: list[str] | None = None, canary_nodes: list[str] | None = None,
) -> ModeSetting:
    """Switch the mode for every flow from its next decision on; no restart needed."""
    setting = ModeSetting(mode=Mode(mode), canary_partitions=canary_partitions or [], canary_nodes=canary_nodes or [])
    with store.session() as s:
        row = s.get(RuntimeSetting, MODE_KEY) or RuntimeSetting(key=MODE_KEY)
        row.value = setting.model_dump(mode="json", exclude={"updated_by", "updated_at"})
        row.updated_by, row.updated_at = by, _now(None)
        s.add(row)
        s.commit()
    return get_mode(store, default=setting.mode)


def get_mode(store: Store, default: Mode = Mode.OBSERVE, default_canary_partitions: list[str] | None = None,
             default_canary_nodes: list[str] | None = None) -> ModeSetting:
    """The mode in force: the run-time setting if one was made, else the given defaults
    (from Settings). A corrupt stored value falls back to the default, never to `act`."""
    with store.session() as s:
        row = s.get(RuntimeSetting, MODE_KEY)
    fallback = ModeSetting(mode=default, canary_partitions=default_canary_partitions or [],
                           canary_nodes=default_canary_nodes or [])
    if row is None:
        return fallback
    try:
        return ModeSetting(**row.value, updated_by=row.updated_by, updated_at=row.updated_at)
    except (TypeError, ValueError):
        return fallback


# --- history for decisions ------------------------------------------------------------------


def _blamed(incident: Incident) -> list[str]:
    """The nodes an incident held at fault: its decision's, else the alarmed node, else a one-node
    job's node. Not every node of a multi-node job: an Xid on one of 2,048 nodes must not climb
    the ladder (or the lemon count) of the other 2,047."""
    decision = incident.decision or {}
    if "faulty_nodes" in decision:
        return list(decision.get("faulty_nodes") or [])
    if incident.kind == "node" and incident.node:
        return [incident.node]
    nodes = list(incident.nodes or [])
    return nodes if len(nodes) == 1 else []


def load_history(
    store: Store,
    *,
    cluster: str,
    now: datetime,
    signature: str,
    job_id: str | None = None,
    nodes: Iterable[str] = (),
    cluster_nodes: Iterable[Any] = (),
    exclude_incident_id: int | None = None,
    lookback: timedelta = timedelta(days=28),
    drain_window: timedelta = timedelta(hours=24),
    recent_window: timedelta = timedelta(hours=1),
):
    """Build a `pitstop.policy.History` for one decision.

    `cluster_nodes` are the scheduler's NodeInfo for the whole cluster (partition sizes and
    healthy counts); without them the partition guards have nothing to count and stay quiet,
    the breaker and count limits still apply.
    """
    from pitstop.policy.history import DrainRecord, History, LemonSignals, PartitionState, PastIncident

    since = _utc(now - lookback)
    nodes = list(nodes)
    infos = list(cluster_nodes)
    part_of = {i.name: list(i.partitions) for i in infos}
    with store.session() as s:
        same = 0
        if job_id is not None:
            q = select(Incident).where(
                Incident.cluster == cluster, Incident.job_id == job_id, Incident.signature == signature)
            if exclude_incident_id is not None:
                q = q.where(Incident.id != exclude_incident_id)
            # "Failed the same way" = the same signature, on a node the job can still land on (or
            # on no node in particular): a fault on a node the requeue excluded since is not the
            # job repeating itself (the third Xid 79 of a long run, each on another node).
            same = sum(1 for i in s.exec(q) if not _blamed(i) or set(_blamed(i)) & set(nodes))
        recent = list(s.exec(select(Incident).where(Incident.cluster == cluster, Incident.created_at >= since)))
        drains = list(s.exec(
            select(ActionRecord).join(Incident, Incident.id == ActionRecord.incident_id).where(
                Incident.cluster == cluster, ActionRecord.kind == "drain",
                ActionRecord.state == ActionState.DONE.value, ActionRecord.finished_at >= _utc(now - drain_window))))
        tickets = list(s.exec(select(Ticket).where(Ticket.cluster == cluster, Ticket.created_at >= since)))
        xids = list(s.exec(select(XidEvent).where(XidEvent.cluster == cluster, XidEvent.seen_at >= since)))
    node_incidents: dict[str, list[PastIncident]] = {n: [] for n in nodes}
    signals: dict[str, LemonSignals] = {}
    for n in nodes:
        mine = [i for i in recent if n in _blamed(i) and i.id != exclude_incident_id]
        for i in mine:
            node_incidents[n].append(PastIncident(id=i.id, at=i.created_at, cause=_cause(i.cause), signature=i.signature,
                                                  job_id=i.job_id, nodes=list(i.nodes or [])))
        signals[n] = LemonSignals(
            distinct_failed_jobs=len({i.job_id for i in mine if i.job_id}),
            xid_count=sum(1 for x in xids if x.node == n),
            tickets=sum(1 for t in tickets if t.node == n),
            node_faults=len(mine),
        )
    cluster_recent = [PastIncident(id=i.id, at=i.created_at, cause=_cause(i.cause), signature=i.signature,
                                   job_id=i.job_id, nodes=list(i.nodes or []))
                      for i in recent if i.id != exclude_incident_id and i.kind in {"job", "node"}
                      and _utc(i.created_at) >= _utc(now - recent_window)]
    scopes = breakers(store)
    drain_rows: list[DrainRecord] = []
    for d in drains:
        if d.finished_at is None:
            continue
        drain_rows.append(DrainRecord(node=d.target, at=d.finished_at, partitions=part_of.get(d.target, [])))
    partitions: dict[str, PartitionState] = {}
    for info in infos:
        for p in info.partitions:
            st = partitions.setdefault(p, PartitionState(name=p, size=0, healthy=0))
            st.size += 1
            st.healthy += 0 if (info.is_drained or info.is_down) else 1
    return History(
        job_same_failures=same,
        node_incidents=node_incidents,
        lemon_signals=signals,
        recent_drains=drain_rows,
        partitions=partitions,
        cluster_size=len(infos) or None,
        cluster_healthy=sum(1 for i in infos if not (i.is_drained or i.is_down)) if infos else None,
        open_breakers={b.scope: b.reason or "" for b in scopes if b.is_open},
        breaker_resets={b.scope: b.reset_at for b in scopes if not b.is_open and b.reset_at is not None},
        cluster_recent=cluster_recent,
    )


def _cause(value: str) -> Cause:
    try:
        return Cause(value)
    except ValueError:
        return Cause.UNKNOWN
