"""SQLModel tables. Adding a column to an existing table needs a migration in `migrations.py`."""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import JSON, Column, Text, UniqueConstraint
from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class SchemaVersion(SQLModel, table=True):
    __tablename__ = "pitstop_schema_version"

    id: int = Field(default=1, primary_key=True)
    version: int


class Run(SQLModel, table=True):
    """One command wrapped by `pitstop run`."""

    __tablename__ = "runs"

    id: str = Field(primary_key=True, description="run id, also the run directory name")
    name: str | None = Field(default=None, description="--name given to pitstop run")
    command: list[str] = Field(sa_column=Column(JSON, nullable=False))
    cwd: str
    host: str
    user: str
    slurm_job_id: str | None = Field(default=None, index=True)
    run_dir: str
    started_at: datetime = Field(default_factory=utcnow, index=True)
    ended_at: datetime | None = None
    exit_code: int | None = None
    signal: int | None = None
    status: str = Field(default="running", description="running | succeeded | failed | not_started")
    cause: str | None = Field(default=None, index=True)
    signature: str | None = None
    confidence: float | None = None
    evidence: list[dict] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    notify_status: str | None = Field(default=None, description="sent | failed: <why> | skipped")
    attachments_skipped: list[dict] = Field(
        default_factory=list, sa_column=Column(JSON, nullable=False)
    )
    error: str | None = None


# --- remediation records (incidents, action journal, nodes, Xids, tickets, breakers, mode) ---
# Times are stored as UTC; SQLite hands them back naive, so readers treat naive as UTC.


class Incident(SQLModel, table=True):
    """One thing that went wrong: a job that ended badly, or a node alarm. Created idempotently."""

    __tablename__ = "incidents"
    __table_args__ = (UniqueConstraint("cluster", "job_id", "end_time", name="uq_incident_job_end"),)

    id: int | None = Field(default=None, primary_key=True)
    idem_key: str = Field(unique=True, description="job:<cluster>:<job>:<end> or node:<cluster>:<node>:<alarm>")
    cluster: str = Field(index=True)
    kind: str = Field(description="job | node | switch (a leaf switch's fabric incident)")
    job_id: str | None = Field(default=None, index=True)
    node: str | None = Field(default=None, index=True)
    nodes: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    end_time: datetime | None = None
    cause: str = Field(index=True)
    signature: str
    confidence: float = 0.0
    evidence: list[dict] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    decision: dict | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    status: str = Field(default="open", description="open | acting | awaiting_approval | done | failed")
    flow_run_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow, index=True)
    updated_at: datetime = Field(default_factory=utcnow)


class ActionRecord(SQLModel, table=True):
    """The action journal: intent is written before execution, the result after."""

    __tablename__ = "actions"
    __table_args__ = (UniqueConstraint("incident_id", "seq", name="uq_action_incident_seq"),)

    id: int | None = Field(default=None, primary_key=True)
    incident_id: int = Field(foreign_key="incidents.id", index=True)
    seq: int
    kind: str = Field(index=True)
    target: str = Field(index=True)
    params: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    state: str = Field(
        default="intended",
        index=True,
        description="intended | running | done | failed | skipped | would_do | awaiting_approval | denied",
    )
    explanation: str = ""
    result: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    finished_at: datetime | None = Field(default=None, index=True)


class NodeRecord(SQLModel, table=True):
    """What Pitstop knows about a node now: last state, drain owner, ladder rung, lemon flag."""

    __tablename__ = "nodes"
    __table_args__ = (UniqueConstraint("cluster", "name", name="uq_node_cluster_name"),)

    id: int | None = Field(default=None, primary_key=True)
    cluster: str = Field(index=True)
    name: str = Field(index=True)
    state: str | None = None
    reason: str | None = None
    drain_owner: str = Field(default="none", description="none | pitstop | foreign")
    ladder: str | None = None
    ladder_rung: int | None = Field(default=None, description="0-based rung last used")
    lemon: bool = False
    lemon_reasons: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    xid_counts: dict[str, int] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    last_incident_id: int | None = None
    updated_at: datetime = Field(default_factory=utcnow)


class NodeEvent(SQLModel, table=True):
    """Node history: state changes, drains/resumes, ladder moves, lemon flags, checks."""

    __tablename__ = "node_events"

    id: int | None = Field(default=None, primary_key=True)
    cluster: str = Field(index=True)
    node: str = Field(index=True)
    at: datetime = Field(default_factory=utcnow, index=True)
    kind: str = Field(description="state | ladder | lemon | check | xid")
    state: str | None = None
    detail: str = ""
    incident_id: int | None = None


class XidWatermark(SQLModel, table=True):
    """How far the kernel log of a node has been counted, so an old Xid never counts twice."""

    __tablename__ = "xid_watermarks"
    __table_args__ = (UniqueConstraint("cluster", "node", name="uq_xid_watermark_node"),)

    id: int | None = Field(default=None, primary_key=True)
    cluster: str
    node: str
    boot_id: str = Field(default="", description="kernel boot id; '' when unknown")
    kernel_ts: float = Field(default=-1.0, description="highest dmesg timestamp counted this boot")
    updated_at: datetime = Field(default_factory=utcnow)


class XidEvent(SQLModel, table=True):
    """One Xid line counted once (the unique key makes re-scans harmless)."""

    __tablename__ = "xid_events"
    __table_args__ = (
        UniqueConstraint("cluster", "node", "boot_id", "kernel_ts", "xid", "pci", name="uq_xid_event"),
    )

    id: int | None = Field(default=None, primary_key=True)
    cluster: str = Field(index=True)
    node: str = Field(index=True)
    boot_id: str = ""
    kernel_ts: float
    xid: int = Field(index=True)
    pci: str = ""
    line: str = ""
    seen_at: datetime = Field(default_factory=utcnow, index=True)


class Ticket(SQLModel, table=True):
    """An RMA ticket: what a vendor needs to replace a GPU or board."""

    __tablename__ = "tickets"
    __table_args__ = (UniqueConstraint("incident_id", "node", name="uq_ticket_incident_node"),)

    id: int | None = Field(default=None, primary_key=True)
    cluster: str = Field(index=True)
    node: str = Field(index=True)
    incident_id: int | None = Field(default=None, foreign_key="incidents.id")
    gpu_serial: str | None = None
    gpu_uuid: str | None = None
    pci_bus: str | None = None
    xid_history: list[dict] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    dcgm_results: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    evidence: list[dict] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    status: str = Field(default="proposed",
                        description="proposed | approved | denied | sending (answer not yet recorded) | sent | send_failed")
    sink_result: str | None = None
    created_at: datetime = Field(default_factory=utcnow, index=True)
    updated_at: datetime = Field(default_factory=utcnow)


class Breaker(SQLModel, table=True):
    """A storm-guard circuit breaker; once open only a human closes it."""

    __tablename__ = "breakers"

    scope: str = Field(primary_key=True, description="cluster | partition:<name>")
    is_open: bool = False
    opened_at: datetime | None = None
    reason: str | None = None
    trips: int = 0
    reset_by: str | None = None
    reset_at: datetime | None = None
    reset_comment: str | None = None


class RuntimeSetting(SQLModel, table=True):
    """Settings changed at run time without a restart (the mode); flows read them per decision."""

    __tablename__ = "runtime_settings"

    key: str = Field(primary_key=True)
    value: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    updated_by: str | None = None
    updated_at: datetime = Field(default_factory=utcnow)


class IncidentLabel(SQLModel, table=True):
    """An operator's correction of an incident's cause (`pitstop label`). Every label is kept;
    the newest one per incident is the incident's label. The log excerpt is a bounded snapshot
    taken when labelled, so the incident can be re-classified after its logs are rotated away."""

    __tablename__ = "incident_labels"

    id: int | None = Field(default=None, primary_key=True)
    incident_id: int = Field(foreign_key="incidents.id", index=True)
    cause: str = Field(index=True, description="the cause the operator says is right")
    predicted_cause: str = Field(description="what Pitstop had said when it was labelled")
    predicted_signature: str = ""
    note: str = ""
    labelled_by: str
    labelled_at: datetime = Field(default_factory=utcnow, index=True)
    excerpt: str = Field(default="", sa_column=Column(Text, nullable=False))
    kernel_excerpt: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    facts: dict | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    sources: list[dict] = Field(
        default_factory=list, sa_column=Column(JSON, nullable=False),
        description="where the excerpt came from: [{path, size, lines, truncated}] or the stored evidence",
    )
