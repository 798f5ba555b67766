"""What a routed flow run is about (its subject), and which incident answers it. Pure.

The same function keys an event (through the parameters its route templates from it) and a flow
run (through the parameters it was created with), so "is there a run for this event?" is a
lookup. The incident rules mirror how the flows open incidents: post_failure keys a job
incident by (cluster, job id, end time), node_alarm a node incident by (node, alarm key).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import ValidationError

from pitstop.events.models import JOB_ENDED, NODE_ALARM, JobEnded
from pitstop.reconcile.model import KnownIncident
from pitstop.store.records import job_incident_key

# An incident is created after the event occurred; clocks of the hook host and the flow host
# may differ by this much.
CLOCK_SKEW = timedelta(minutes=2)


def _job_event(params: dict[str, Any]) -> JobEnded | None:
    facts = params.get("facts")
    if not isinstance(facts, dict):
        return None
    given = {k: v for k, v in facts.items() if v is not None}
    data = {"cluster": params.get("cluster") or given.get("cluster") or "-", "state": "UNKNOWN",
            **given, "job_id": str(params.get("job_id") or given.get("job_id") or "")}
    try:  # as flows/post_failure.job_event reads it
        return JobEnded.model_validate(data)
    except ValidationError:
        return None


def _job_key(params: dict[str, Any]) -> str | None:
    event = _job_event(params)
    if event is not None:
        return f"job-event:{event.event_id}"
    if params.get("job_id"):  # a run started by hand, without the event's facts
        return f"job:{params.get('cluster') or '-'}:{params['job_id']}"
    return None


def _job_incident(incident: KnownIncident, params: dict[str, Any], occurred: datetime) -> bool:
    if incident.kind != "job" or incident.job_id != str(params.get("job_id")):
        return False
    event = _job_event(params)
    cluster = str(params.get("cluster") or (event.cluster if event else ""))
    if event is not None and event.end_time is not None:
        return incident.idem_key == job_incident_key(cluster, incident.job_id, event.end_time)
    # Slurm 22.05 gives hooks no end time: the flow took it from the scheduler. The same job
    # id ending later is another incident, so only one opened after this event counts.
    return incident.cluster == cluster and _aware(incident.created_at) >= _aware(occurred) - CLOCK_SKEW


def _alarm_key(params: dict[str, Any]) -> str:
    details = params.get("details") if isinstance(params.get("details"), dict) else {}
    return str(details.get("key") or details.get("event_id") or params.get("alarm") or "")  # node_alarm's rule


def _node_key(params: dict[str, Any]) -> str | None:
    return f"node:{params['node']}:{_alarm_key(params)}" if params.get("node") else None


def _node_incident(incident: KnownIncident, params: dict[str, Any], _occurred: datetime) -> bool:
    node = params.get("node")
    return (incident.kind == "node" and incident.node == node
            and incident.idem_key.endswith(f":{node}:{_alarm_key(params)}"))


def _aware(dt: datetime) -> datetime:
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt


@dataclass(frozen=True)
class Subject:
    key: Callable[[dict[str, Any]], str | None]
    answered_by: Callable[[KnownIncident, dict[str, Any], datetime], bool]


# event name -> how its runs are keyed and which incident answers them
SUBJECTS: dict[str, Subject] = {
    JOB_ENDED: Subject(key=_job_key, answered_by=_job_incident),
    NODE_ALARM: Subject(key=_node_key, answered_by=_node_incident),
}
