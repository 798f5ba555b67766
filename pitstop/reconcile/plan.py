"""Compare what should have happened with what did; say what to start. Pure: no I/O.

Prefect's automation turns each routed event into a flow run; it is the fast path, not the only
one. It can drop a run (it answered 503 / "database is locked" during a burst), and a run can
die with its process (`kill -9` of `pitstop up`, whose fast lane runs flows in-process). So:

(b) an incident stuck in open/acting/awaiting_approval whose runs are all dead (ended badly, or
    busy in Prefect's eyes while the incident lock is free: its process is gone) gets a new run
    of the same deployment with the same parameters; the dead busy runs are marked Crashed;
(a) a routed event with no incident and no live or completed run gets the run the automation
    would have made (the route's parameters rendered from the event).

A new run is safe: the flows are idempotent through the incident key and the action journal
(finished actions are skipped; one left running is confirmed from the cluster's state). Every
start carries an idempotency key derived from the subject and the attempt number, so two
reconcilers (the loop in `pitstop up` and a cron `pitstop reconcile`) start it once. After
`max_attempts` runs for one subject, it is reported instead of retried.
"""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import Any

from pitstop.reconcile.model import (
    BUSY,
    ENDED_BADLY,
    FINISHED_OK,
    STUCK_STATUSES,
    WAITING,
    GiveUp,
    KnownIncident,
    KnownRun,
    Limits,
    MarkCrashed,
    Plan,
    Route,
    SeenEvent,
    StartRun,
)
from pitstop.reconcile.subjects import SUBJECTS

_TEMPLATE = re.compile(r"\{\{\s*event((?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*\}\}")
_MISSING = object()


class RenderError(ValueError):
    """A route parameter this renderer cannot produce the way Prefect would."""


def render_parameters(templates: dict[str, Any], event: SeenEvent) -> dict[str, Any]:
    """The parameters Prefect's run-deployment action makes from `event`. Routes use only
    single-expression templates ("{{ event.payload.job_id }}"), which Prefect renders with
    `tojson`, so each value keeps its type: the value at that path in the event."""
    data = event.model_dump(mode="json")
    rendered: dict[str, Any] = {}
    for name, template in templates.items():
        if not isinstance(template, str):
            rendered[name] = template
            continue
        match = _TEMPLATE.fullmatch(template.strip())
        if match is None:
            raise RenderError(f"parameter {name!r}: only '{{{{ event.<path> }}}}' templates are rendered, not {template!r}")
        value: Any = data
        for part in match.group(1).split(".")[1:]:
            value = value.get(part, _MISSING) if isinstance(value, dict) else _MISSING
            if value is _MISSING:
                raise RenderError(f"parameter {name!r}: event {event.id} has no {template.strip()}")
        rendered[name] = value
    return rendered


def _label_matches(expected: str, actual: str | None) -> bool:
    if actual is None:
        return False
    return actual.startswith(expected[:-1]) if expected.endswith("*") else actual == expected


def route_for(routes: list[Route], event: SeenEvent) -> Route | None:
    for route in routes:
        if route.event == event.event and all(_label_matches(v, event.resource.get(k)) for k, v in route.match.items()):
            return route
    return None


def _utc(dt: datetime | None) -> datetime | None:
    if dt is None:
        return None
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt


def _recent(dt: datetime | None, now: datetime, seconds: float) -> bool:
    return dt is not None and _utc(dt) > now - timedelta(seconds=seconds)


def _describe(run: KnownRun) -> str:
    return f"{run.id} ({run.state.lower()})"


def _alive_for_incident(run: KnownRun, incident: KnownIncident, now: datetime, limits: Limits) -> bool:
    """Is a process (or a worker's queue) still behind this run of a stuck incident?"""
    if run.state in WAITING:
        return True
    if run.state not in BUSY:
        return False
    if incident.lock == "held" or incident.lock == "unknown":
        return True  # held: a live process remediates it; unknown: Prefect's word is all we have
    # lock free: nobody remediates it. A run that changed state a moment ago may not have
    # reached the lock yet.
    return _recent(run.state_since, now, limits.grace_s)


def _alive_without_incident(run: KnownRun, now: datetime, limits: Limits) -> bool:
    """A run of an event that has no incident yet: busy for longer than stale_s means its
    process died before the flow opened the incident (that takes seconds, not minutes)."""
    if run.state in WAITING:
        return True
    return run.state in BUSY and _recent(run.state_since or run.created, now, limits.stale_s)


def _attempt_key(deployment: str, subject: str, attempt: int) -> str:
    return f"pitstop-reconcile {deployment} {subject} attempt {attempt}"


def _resume(plan: Plan, *, deployment: str, deployment_id: str | None, parameters: dict[str, Any],
            subject: str, runs: list[KnownRun], why: str, limits: Limits, incident_id: int | None = None) -> None:
    """Plan the next run for a subject whose runs are all dead, or give up on it."""
    for run in runs:
        if run.state in BUSY:  # Prefect still shows it busy: say what happened to it
            plan.crash.append(MarkCrashed(flow_run_id=run.id, why="pitstop reconcile: its process is gone "
                                          "(nothing holds the incident, or it never opened one); resumed by a new run"))
    if len(runs) >= limits.max_attempts:
        tried = ", ".join(_describe(r) for r in runs[-3:])
        plan.give_up.append(GiveUp(subject=subject, incident_id=incident_id,
                                   why=f"{why}; {len(runs)} runs already ({tried}); not retried again: "
                                   "look at the last run's logs, then re-run it by hand"))
        return
    plan.start.append(StartRun(
        deployment=deployment, deployment_id=deployment_id, parameters=parameters, subject=subject,
        idempotency_key=_attempt_key(deployment, subject, len(runs) + 1), why=why,
        incident_id=incident_id, replaces=runs[-1].id if runs else None,
    ))


def plan(
    routes: list[Route],
    events: list[SeenEvent],
    runs: list[KnownRun],
    incidents: list[KnownIncident],
    now: datetime,
    limits: Limits | None = None,
) -> Plan:
    """What to start (and which dead runs to mark Crashed) so every routed event and every
    unfinished incident ends up with a live run or a finished incident."""
    limits = limits or Limits()
    now = _utc(now)
    out = Plan()
    event_of = {r.deployment: r.event for r in routes}
    by_id = {r.id: r for r in runs}
    by_subject: dict[tuple[str, str], list[KnownRun]] = defaultdict(list)
    for run in sorted(runs, key=lambda r: _utc(r.created) or now):
        subject = SUBJECTS[event_of[run.deployment]].key(run.parameters) if run.deployment in event_of else None
        if subject is not None:
            by_subject[(run.deployment, subject)].append(run)
    handled: set[tuple[str, str]] = set()

    # (b) unfinished incidents first: their subject is theirs, whatever events say about it
    for incident in sorted(incidents, key=lambda i: i.id):
        if incident.status not in STUCK_STATUSES or not incident.flow_run_id:
            continue
        run = by_id.get(incident.flow_run_id)
        if run is None or run.deployment not in event_of:
            out.notes.append(f"incident {incident.id} is {incident.status}, but its flow run {incident.flow_run_id} "
                             "is not a run of a routed deployment Prefect still has; re-run it by hand")
            continue
        subject = SUBJECTS[event_of[run.deployment]].key(run.parameters) or f"run:{run.id}"
        if (run.deployment, subject) in handled:
            continue
        handled.add((run.deployment, subject))
        siblings = by_subject.get((run.deployment, subject)) or [run]
        if any(_alive_for_incident(r, incident, now, limits) for r in siblings):
            out.in_flight += 1
            continue
        _resume(out, deployment=run.deployment, deployment_id=run.deployment_id, parameters=run.parameters,
                subject=subject, runs=siblings, incident_id=incident.id, limits=limits,
                why=f"incident {incident.id} is {incident.status} but no live run handles it "
                    f"(last: {_describe(siblings[-1])}, incident lock {incident.lock})")

    # (a) routed events that nothing answered
    for event in sorted(events, key=lambda e: _utc(e.occurred)):
        route = route_for(routes, event)
        if route is None:
            continue
        if _recent(max(_utc(event.occurred), _utc(event.received) or _utc(event.occurred)), now, limits.grace_s):
            out.young += 1
            continue
        try:
            parameters = render_parameters(route.parameters, event)
        except ValueError as exc:
            out.notes.append(f"event {event.id}: {exc}")
            continue
        subject_rules = SUBJECTS[route.event]
        subject = subject_rules.key(parameters)
        if subject is None or (route.deployment, subject) in handled:
            continue
        handled.add((route.deployment, subject))
        if any(subject_rules.answered_by(i, parameters, event.occurred) for i in incidents):
            out.settled += 1
            continue
        siblings = by_subject.get((route.deployment, subject), [])
        if any(r.state in FINISHED_OK for r in siblings):
            out.settled += 1  # it ran to the end; the flow decided (e.g. an id it refused)
            continue
        if any(_alive_without_incident(r, now, limits) for r in siblings):
            out.in_flight += 1
            continue
        dead = [r for r in siblings if r.state in ENDED_BADLY or r.state in BUSY]
        why = (f"{event.event} {event.id} ({event.occurred.isoformat()}) has no incident and "
               + (f"no live run (last: {_describe(dead[-1])})" if dead else "no flow run: the automation dropped it"))
        _resume(out, deployment=route.deployment, deployment_id=None, parameters=parameters,
                subject=subject, runs=dead, why=why, limits=limits)
    return out
