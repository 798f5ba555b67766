"""What reconciliation looks at and what it decides: plain pydantic models, no I/O.

The adapter (deployments/reconcile.py) fills SeenEvent, KnownRun and KnownIncident from
Prefect's events API, its flow runs and Pitstop's store; `plan` (pitstop/reconcile/plan.py)
turns them into a Plan; the adapter carries the plan out.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# Prefect state types, by what they say about the process behind a run.
WAITING = frozenset({"SCHEDULED"})  # no process yet: a worker will take it
BUSY = frozenset({"PENDING", "RUNNING", "PAUSED", "CANCELLING"})  # a process should be behind it
FINISHED_OK = frozenset({"COMPLETED"})
ENDED_BADLY = frozenset({"FAILED", "CRASHED", "CANCELLED"})

# Incident statuses a flow leaves only by finishing: one still in them needs a live run.
# ("open" is the incident before its decision is saved: the deciding step.)
STUCK_STATUSES = frozenset({"open", "acting", "awaiting_approval"})


class Route(BaseModel):
    """What reconciliation needs of one deployments.serve.EventRoute."""

    flow: str = Field(description="the flow's name, e.g. post-failure")
    deployment: str = Field(description="the deployment's name (the flow's, plus any suffix)")
    event: str
    match: dict[str, str] = Field(default_factory=dict)
    parameters: dict[str, Any]


class SeenEvent(BaseModel):
    """An event as Prefect's `POST /api/events/filter` returns it."""

    model_config = ConfigDict(extra="ignore")

    id: str
    event: str
    occurred: datetime
    received: datetime | None = None
    resource: dict[str, str] = Field(default_factory=dict)
    payload: dict[str, Any] = Field(default_factory=dict)


class KnownRun(BaseModel):
    """A flow run of one of the routed deployments."""

    id: str
    deployment: str = Field(description="the route's deployment name, e.g. post-failure")
    deployment_id: str
    parameters: dict[str, Any] = Field(default_factory=dict)
    state: str = Field(description="Prefect state type, upper case: RUNNING, CRASHED, ...")
    state_since: datetime | None = Field(default=None, description="when it entered that state")
    created: datetime | None = None


class KnownIncident(BaseModel):
    id: int
    kind: str
    cluster: str
    job_id: str | None = None
    node: str | None = None
    idem_key: str
    end_time: datetime | None = None
    status: str
    flow_run_id: str | None = None
    created_at: datetime
    lock: Literal["held", "free", "unknown"] = Field(
        default="unknown",
        description="the incident lock a remediating process holds (tasks/journal.incident_lock): "
        "held, free (nobody), unknown (never taken on this host, or taken on another one)",
    )


class Limits(BaseModel):
    grace_s: float = Field(default=120.0, ge=0, description="younger events/states are left to the fast path")
    stale_s: float = Field(default=600.0, gt=0, description="a busy run with no incident after this long is dead")
    max_attempts: int = Field(default=5, ge=1, description="runs per subject before reconciliation gives up")


class StartRun(BaseModel):
    deployment: str
    deployment_id: str | None = Field(default=None, description="None: the adapter looks it up by name")
    parameters: dict[str, Any]
    subject: str
    idempotency_key: str = Field(description="the same for every reconciler that plans this start")
    why: str
    incident_id: int | None = None
    replaces: str | None = Field(default=None, description="the dead flow run this one takes over from")


class MarkCrashed(BaseModel):
    flow_run_id: str
    why: str


class GiveUp(BaseModel):
    subject: str
    why: str
    incident_id: int | None = None


class Plan(BaseModel):
    start: list[StartRun] = Field(default_factory=list)
    crash: list[MarkCrashed] = Field(default_factory=list)
    give_up: list[GiveUp] = Field(default_factory=list)
    in_flight: int = Field(default=0, description="subjects a live run is handling")
    settled: int = Field(default=0, description="events with an incident or a completed run")
    young: int = Field(default=0, description="events inside the grace period: left to the automation")
    notes: list[str] = Field(default_factory=list)
