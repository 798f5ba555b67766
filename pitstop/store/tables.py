"""SQLModel tables. Adding a column to an existing table needs a migration in `migrations.py`."""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import JSON, Column
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
