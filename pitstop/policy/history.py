"""What the decision needs to know about the past, as plain data, plus pure summaries of it.

The flow fills a `History` from the store (`pitstop.store.records.load_history`) and from the
scheduler; `decide()` never reads anything else.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from pydantic import BaseModel, Field

from pitstop.models import Cause


def as_utc(dt: datetime) -> datetime:
    """Naive datetimes (SQLite gives them back naive) are taken to be UTC."""
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


class PastIncident(BaseModel):
    """One earlier incident touching a node or a job lineage."""

    id: int | None = None
    at: datetime
    cause: Cause
    signature: str
    job_id: str | None = None
    nodes: list[str] = Field(default_factory=list, description="nodes the fault was seen on")


class DrainRecord(BaseModel):
    """An automatic drain Pitstop carried out (from the action journal)."""

    node: str
    at: datetime
    partitions: list[str] = Field(default_factory=list)


class PartitionState(BaseModel):
    name: str
    size: int = Field(ge=0)
    healthy: int = Field(ge=0, description="nodes neither drained nor down right now")


class LemonSignals(BaseModel):
    """Meta's lemon-node signals for one node over the lemon window."""

    distinct_failed_jobs: int = 0
    xid_count: int = 0
    tickets: int = 0
    node_faults: int = Field(default=0, description="incidents blaming this node")
    jobs_run: int = Field(default=0, description="jobs that ran on it; 0 when unknown")

    @property
    def node_fail_rate(self) -> float | None:
        return self.node_faults / self.jobs_run if self.jobs_run else None


class History(BaseModel):
    """Everything the past says that a decision depends on. Empty means "nothing known"."""

    job_same_failures: int = Field(
        default=0, ge=0, description="earlier incidents of this job lineage with the same signature"
    )
    node_incidents: dict[str, list[PastIncident]] = Field(
        default_factory=dict, description="per node, earlier incidents (excluding this one)"
    )
    lemon_signals: dict[str, LemonSignals] = Field(default_factory=dict)
    recent_drains: list[DrainRecord] = Field(default_factory=list)
    partitions: dict[str, PartitionState] = Field(default_factory=dict)
    cluster_size: int | None = Field(default=None, ge=0)
    cluster_healthy: int | None = Field(default=None, ge=0)
    open_breakers: dict[str, str] = Field(
        default_factory=dict, description="scope -> reason, e.g. {'partition:gpu': '...'}"
    )
    switches: dict[str, list[str]] = Field(
        default_factory=dict, description="leaf switch -> its nodes, for the leaves of the nodes involved")
    cluster_recent: list[PastIncident] = Field(
        default_factory=list, description="every incident of the cluster in the switch-storm window, this one excluded")
    breaker_resets: dict[str, datetime] = Field(
        default_factory=dict,
        description="scope -> when a human last closed its breaker; the storm guard of that scope "
        "counts only drains after it (the human has seen the storm so far)",
    )


# --- pure summaries -------------------------------------------------------------------------


def within(items_at: list[datetime], now: datetime, window: timedelta) -> int:
    since = as_utc(now) - window
    return sum(1 for at in items_at if as_utc(at) >= since)


def drains_in_window(
    drains: list[DrainRecord],
    now: datetime,
    window: timedelta,
    partition: str | None = None,
    not_before: datetime | None = None,
) -> int:
    """Distinct nodes drained in the window (and after `not_before`), optionally only in `partition`."""
    since = as_utc(now) - window
    if not_before is not None:
        since = max(since, as_utc(not_before))
    return len(
        {
            d.node
            for d in drains
            if as_utc(d.at) >= since and (partition is None or partition in d.partitions)
        }
    )


def recurrences(
    incidents: list[PastIncident], now: datetime, window: timedelta, same_fault
) -> int:
    """How many earlier incidents within the window `same_fault(incident)` accepts."""
    since = as_utc(now) - window
    return sum(1 for i in incidents if as_utc(i.at) >= since and same_fault(i))
