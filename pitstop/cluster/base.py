"""The small interfaces every flow talks to. Slurm and the demo cluster implement them.

Identifiers cross these interfaces as validated strings and are passed to tools as separate argv
items, never interpolated into a shell string.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

# Slurm node names: letters, digits, '-', '_', '.'; job ids: 123, 123_4 (array), 123+1 (het).
_NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_JOB_RE = re.compile(r"^[0-9]{1,12}([_+][0-9]{1,9})?$")


class ClusterError(RuntimeError):
    """A scheduler command failed; the message names the command and what it said."""


class NotFound(ClusterError):
    """The node or job does not exist (or no longer exists) in the scheduler."""


class InvalidIdentifier(ValueError):
    """A node or job id that would be unsafe or meaningless to pass to the scheduler."""


def validate_node_name(name: str) -> str:
    if not isinstance(name, str) or not _NODE_RE.match(name):
        raise InvalidIdentifier(f"not a valid node name: {name!r}")
    return name


def validate_job_id(job_id: str | int) -> str:
    text = str(job_id)
    if not _JOB_RE.match(text):
        raise InvalidIdentifier(f"not a valid job id: {job_id!r}")
    return text


class NodeInfo(BaseModel):
    name: str
    state: str = Field(description="base state, upper case: IDLE, ALLOCATED, MIXED, DOWN, ...")
    flags: list[str] = Field(default_factory=list, description="DRAIN, DRAINING, REBOOT, ...")
    reason: str | None = None
    reason_user: str | None = None
    reason_time: datetime | None = None
    partitions: list[str] = Field(default_factory=list)
    gres: str | None = None
    cpus: int | None = None

    @property
    def is_drained(self) -> bool:
        return any(f in {"DRAIN", "DRAINED", "DRAINING"} for f in self.flags) or self.state in {
            "DRAIN",
            "DRAINED",
            "DRAINING",
        }

    @property
    def is_down(self) -> bool:
        return self.state in {"DOWN", "FAIL", "FAILING"} or "DOWN" in self.flags


class JobRecord(BaseModel):
    job_id: str
    name: str | None = None
    user: str | None = None
    partition: str | None = None
    state: str = Field(description="COMPLETED, FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, ...")
    exit_code: int | None = Field(default=None, description="the process exit status, not wait()")
    signal: int | None = None
    nodes: list[str] = Field(default_factory=list)
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    time_limit_min: int | None = None
    stdout_path: str | None = None
    stderr_path: str | None = None
    work_dir: str | None = None
    restart_count: int = 0
    command: str | None = None
    submit_line: str | None = None
    excluded_nodes: list[str] = Field(default_factory=list)
    reason: str | None = None


class JobChanges(BaseModel):
    """A changed configuration for a requeued or resubmitted job."""

    exclude_nodes: list[str] = Field(default_factory=list)
    time_limit_min: int | None = Field(default=None, gt=0)
    env: dict[str, str] = Field(default_factory=dict, description="e.g. NCCL_* overrides")


@runtime_checkable
class Scheduler(Protocol):
    """What Pitstop reads from and does to a cluster's scheduler."""

    name: str

    def nodes(self, partition: str | None = None) -> list[NodeInfo]: ...
    def node(self, name: str) -> NodeInfo: ...
    def job(self, job_id: str) -> JobRecord: ...
    def jobs(self, user: str | None = None) -> list[JobRecord]: ...
    def drain(self, node: str, reason: str) -> None: ...
    def resume(self, node: str) -> None: ...
    def reboot(self, node: str, reason: str) -> None: ...
    def requeue(self, job_id: str, hold: bool = False) -> None: ...
    def update_job(self, job_id: str, changes: JobChanges) -> None: ...
    def resubmit(self, job_id: str, changes: JobChanges) -> str: ...


class HostStatus(StrEnum):
    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"


class HostResult(BaseModel):
    """The outcome of one command on one host; a failed host never raises out of a fan-out."""

    host: str
    status: HostStatus
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    duration_s: float = 0.0


@runtime_checkable
class RemoteRunner(Protocol):
    """Runs an argv on nodes (SSH on a real cluster, in-process on the demo cluster)."""

    def run(self, host: str, argv: list[str], timeout_s: float | None = None) -> HostResult: ...
    def fan_out(
        self, hosts: list[str], argv: list[str], timeout_s: float | None = None
    ) -> list[HostResult]: ...
