"""Pitstop's trigger events and their Prefect wire form.

`JobEnded` and `NodeAlarm` are what the Slurm hooks know; `WireEvent` is the JSON body Prefect's
`POST /api/events` accepts (id, occurred, event, resource, payload, related). Event ids are
derived from what the event is about, so a re-delivered or re-emitted event carries the same id
and Prefect's trigger service (and the flows' incident key) see it once.

Imports only pydantic: this module sits on the `pitstop epilog` fast path.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

JOB_ENDED = "pitstop.job.ended"
NODE_ALARM = "pitstop.node.alarm"

# A fixed namespace: ids must be the same on every host and in every release.
_EVENT_NAMESPACE = uuid.UUID("5b0f2a8e-3c1d-4f7a-9e55-0c1f7d2a9b31")

# Slurm states that are not a failure Pitstop should remediate.
SUCCESS_STATES = frozenset({"COMPLETED"})


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def stable_event_id(*parts: object) -> str:
    return str(uuid.uuid5(_EVENT_NAMESPACE, "|".join("" if p is None else str(p) for p in parts)))


class WireEvent(BaseModel):
    """One event as Prefect's events API takes it; also the format of a spool file."""

    model_config = ConfigDict(extra="ignore")

    id: str
    occurred: datetime
    event: str = Field(max_length=1024)
    resource: dict[str, str]
    payload: dict[str, Any] = Field(default_factory=dict)
    related: list[dict[str, str]] = Field(default_factory=list)

    def to_api(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class JobEnded(BaseModel):
    """A job left the running state. `state` is derived from exit code and signal in the hook;
    the post_failure flow re-reads the authoritative job record."""

    cluster: str
    job_id: str
    state: str = Field(
        description="COMPLETED | FAILED | SIGNALED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | UNKNOWN"
    )
    exit_code: int | None = None
    signal: int | None = None
    derived_exit_code: int | None = None
    user: str | None = None
    job_name: str | None = None
    partition: str | None = None
    nodelist: str | None = Field(default=None, description="Slurm hostlist, e.g. gpu[01-04]")
    nodes: list[str] = Field(default_factory=list)
    restart_count: int = 0
    stdout: str | None = Field(default=None, description="as Slurm gives it: may hold %j patterns")
    stderr: str | None = None
    work_dir: str | None = None
    end_time: datetime | None = Field(default=None, description="from Slurm when it says so")
    seen_at: datetime = Field(default_factory=utcnow, description="when the hook ran")
    hook: str = "EpilogSlurmctld"
    scheduler_reason: str | None = Field(default=None, description="scontrol's Reason, if read")

    @property
    def is_failure(self) -> bool:
        return self.state not in SUCCESS_STATES

    @property
    def event_id(self) -> str:
        # (cluster, job, restart, end time): Slurm 22.05 gives hooks no end time, and the hook
        # runs as the job ends, so the minute it ran stands in. Job ids do repeat (a controller
        # reset, the demo cluster), and Prefect drops event ids it saw in the last 30 min.
        end = (self.end_time or self.seen_at).strftime("%Y-%m-%dT%H:%M")
        return stable_event_id(JOB_ENDED, self.cluster, self.job_id, self.restart_count, end)

    def to_wire(self) -> WireEvent:
        return WireEvent(
            id=self.event_id,
            occurred=self.end_time or self.seen_at,
            event=JOB_ENDED,
            resource={
                "prefect.resource.id": f"pitstop.job.{self.cluster}.{self.job_id}",
                "prefect.resource.name": f"job {self.job_id}",
                "pitstop.cluster": self.cluster,
                "pitstop.job.state": self.state,
                "pitstop.job.outcome": "failure" if self.is_failure else "success",
            },
            payload=self.model_dump(mode="json"),
            related=[
                {"prefect.resource.id": f"pitstop.node.{self.cluster}.{n}",
                 "prefect.resource.role": "node"}
                for n in self.nodes[:50]  # Prefect caps related resources; the payload has all
            ],
        )


class NodeAlarm(BaseModel):
    """A node needs attention: a failed prolog check, an Xid seen by a sweep, an odd DOWN state."""

    cluster: str
    node: str
    alarm: str = Field(description="kind, as flows/node_alarm.py knows them, e.g. prolog_failed")
    summary: str = Field(description="one line an operator can act on")
    job_id: str | None = None
    restart_count: int = 0
    details: dict[str, Any] = Field(default_factory=dict)
    raised_at: datetime = Field(default_factory=utcnow)
    source: Literal["prolog", "sweep", "slurm", "operator"] = "prolog"

    @property
    def event_id(self) -> str:
        # One alarm per (node, kind, job start); without a job, one per node, kind and minute.
        moment = None if self.job_id else self.raised_at.strftime("%Y-%m-%dT%H:%M")
        return stable_event_id(
            NODE_ALARM, self.cluster, self.node, self.alarm, self.job_id, self.restart_count, moment
        )

    def to_wire(self) -> WireEvent:
        payload = self.model_dump(mode="json")
        # node_alarm(details=...) dedups on details.key: give it this event's stable id
        payload["details"] = {"key": self.event_id, "summary": self.summary, **payload["details"]}
        return WireEvent(
            id=self.event_id,
            occurred=self.raised_at,
            event=NODE_ALARM,
            resource={
                "prefect.resource.id": f"pitstop.node.{self.cluster}.{self.node}",
                "prefect.resource.name": self.node,
                "pitstop.cluster": self.cluster,
                "pitstop.alarm": self.alarm,
            },
            payload=payload,
        )
