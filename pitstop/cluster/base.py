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

from pitstop.ids import PATTERNS

# The one definition of a node name and a job id (pitstop/ids.py, which the Slurm hooks use too).
# Always fullmatch: `$` also matches before a trailing newline ('gpu01\n' would pass).
_NODE_RE = PATTERNS["node name"]
_JOB_RE = PATTERNS["job id"]
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


class ClusterError(RuntimeError):
    """A scheduler command failed; the message names the command and what it said."""


class NotFound(ClusterError):
    """The node or job does not exist (or no longer exists) in the scheduler."""


class InvalidIdentifier(ValueError):
    """A node or job id that would be unsafe or meaningless to pass to the scheduler."""


def validate_node_name(name: str) -> str:
    if not isinstance(name, str) or not _NODE_RE.fullmatch(name):
        raise InvalidIdentifier(f"not a valid node name: {name!r}")
    return name


def validate_job_id(job_id: str | int) -> str:
    text = str(job_id)
    if isinstance(job_id, bool) or not _JOB_RE.fullmatch(text):
        raise InvalidIdentifier(f"not a valid job id: {job_id!r}")
    return text


NODE_PLACEHOLDER = "{node}"


def for_node(argv: list[str], node: str) -> list[str]:
    """`{node}` in a configured command is the node's name (e.g. `cat /shared/kern/{node}.log`
    where kernel logs are collected centrally). Plain replace: other braces stay as written."""
    return [a.replace(NODE_PLACEHOLDER, node) if isinstance(a, str) else a for a in argv]


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

    @property
    def is_held(self) -> bool:
        """Waiting for `scontrol release` (requeuehold, hold, sbatch --hold). A job requeued
        while running shows COMPLETING until its processes are gone, already held."""
        return self.reason in HELD_REASONS and self.state in {"PENDING", "COMPLETING", "REQUEUE_HOLD"}


# What scontrol shows as Reason for a held job (requeuehold; hold by the owner; hold by root).
HELD_REASONS = frozenset({"job_requeued_in_held_state", "JobHeldUser", "JobHeldAdmin"})
# States in which a job's run is over (COMPLETING: its processes are being cleaned up).
ENDED_STATES = frozenset({
    "COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "CANCELLED", "PREEMPTED",
    "BOOT_FAIL", "DEADLINE", "COMPLETING",
})


class JobChanges(BaseModel):
    """A changed configuration for a requeued or resubmitted job."""

    exclude_nodes: list[str] = Field(default_factory=list)
    time_limit_min: int | None = Field(default=None, gt=0)
    env: dict[str, str] = Field(default_factory=dict, description="e.g. NCCL_* overrides")

    def describe(self) -> str:
        """'with NCCL_DEBUG=INFO, excluding gpu01, time limit 90 min' ('' when nothing changes)."""
        parts = []
        if self.env:
            parts.append("with " + " ".join(f"{k}={v}" for k, v in self.env.items()))
        if self.exclude_nodes:
            parts.append("excluding " + ",".join(self.exclude_nodes))
        if self.time_limit_min:
            parts.append(f"time limit {self.time_limit_min} min")
        return ", ".join(parts)


# ---- one validation of a JobChanges, for every backend ------------------------------------

# A longer limit is a unit mix-up (seconds for minutes), not a plan.
MAX_TIME_LIMIT_MIN = 366 * 24 * 60
# sbatch --export splits its list on ',' and takes ' and " as quotes (everything up to the next
# quote becomes one value); a newline or NUL cannot travel in an environment variable at all.
_EXPORT_UNSAFE = {
    ",": "a comma",
    "'": "a single quote",
    '"': "a double quote",
    "\n": "a newline",
    "\r": "a carriage return",
    "\x00": "a NUL byte",
}


class InvalidJobChanges(InvalidIdentifier):
    """A JobChanges no backend would apply as asked; refused before anything is run."""


def _refuse(why: str) -> None:
    raise InvalidJobChanges(f"job changes refused: {why}")


def validate_job_changes(changes: JobChanges) -> JobChanges:
    """What every backend accepts, so the demo cluster refuses exactly what Slurm would refuse,
    with the same words. Called before any scheduler command runs."""
    for node in changes.exclude_nodes:
        if not isinstance(node, str) or not _NODE_RE.fullmatch(node):
            _refuse(f"exclude_nodes: not a valid node name: {node!r}")
    limit = changes.time_limit_min
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_TIME_LIMIT_MIN
    ):
        _refuse(
            f"time_limit_min must be whole minutes from 1 to {MAX_TIME_LIMIT_MIN} (366 days), "
            f"not {limit!r}"
        )
    for name, value in changes.env.items():
        if not isinstance(name, str) or not _ENV_NAME_RE.fullmatch(name):
            _refuse(f"env: not a valid environment variable name: {name!r}")
        if not isinstance(value, str):
            _refuse(f"env {name}: the value must be text, not {value!r}")
        bad = next((what for char, what in _EXPORT_UNSAFE.items() if char in value), None)
        if bad:
            _refuse(
                f"env {name}: the value contains {bad}, which sbatch --export cannot carry: "
                f"{value[:80]!r}"
            )
    return changes


def refuse_env_in_place(job_id: str, changes: JobChanges) -> None:
    if changes.env:
        raise ClusterError(
            f"cannot change the environment of job {job_id} in place (Slurm has no such update); "
            "requeue_with_changes resubmits the job's batch script with it instead"
        )


# ---- requeue with changes: one contract, built from each backend's primitives -------------


class RequeueMode(StrEnum):
    IN_PLACE = "in_place"  # the same job id runs again
    RESUBMITTED = "resubmitted"  # its batch script was submitted again as a new job id


class RequeueResult(BaseModel):
    job_id: str = Field(description="the job Pitstop was asked to run again")
    run_job_id: str = Field(description="the job that will run: job_id, or the new job's id")
    mode: RequeueMode
    changes: JobChanges
    steps: list[str] = Field(default_factory=list, description="what was done, in order")
    resumed: bool = Field(default=False, description="finished or found an interrupted run's work")

    @property
    def summary(self) -> str:
        if self.mode is RequeueMode.IN_PLACE:
            return f"requeued job {self.job_id} ({', '.join(self.steps)})"
        said = self.changes.describe()
        if self.resumed:
            return (f"job {self.job_id} was already resubmitted as {self.run_job_id} by an "
                    f"earlier run" + (f" ({said})" if said else ""))
        return f"resubmitted job {self.job_id} as {self.run_job_id}" + (f" {said}" if said else "")


class JobLeftHeld(ClusterError):
    """A requeued job stays held because a change could not be applied; a human releases it."""

    job_id: str = ""


def left_held(job_id: str, what: str, cause: object) -> JobLeftHeld:
    error = JobLeftHeld(
        f"job {job_id} is HELD and Pitstop did not release it: {what} failed ({cause}). Held, it "
        f"cannot start on a node it must avoid or with the old time limit. Fix or drop the "
        f"change, then release it by hand: scontrol release {job_id}"
    )
    error.job_id = job_id
    return error


def resubmit_comment(job_id: str, incident_id: int | None = None) -> str:
    """The tag a resubmission carries (sbatch --comment), so a re-run after a crash finds it."""
    incident = f"incident={int(incident_id)} " if incident_id is not None else ""
    return f"pitstop {incident}resubmit-of={job_id}"


# the tag, then (after " | ") the old job's own comment, if it had one
_RESUBMIT_TAG = re.compile(
    r"pitstop (?:incident=(?P<incident>\d+) )?resubmit-of=(?P<job>[0-9_+]+)(?: \| .*)?", re.S
)


def is_resubmission_of(comment: str | None, job_id: str, incident_id: int | None = None) -> bool:
    """None for incident_id matches any Pitstop resubmission of the job: a job replaced by a new
    submission never runs again, so only one incident can resubmit it."""
    match = _RESUBMIT_TAG.fullmatch(comment or "")
    if match is None or match["job"] != job_id:
        return False
    return incident_id is None or match["incident"] == str(int(incident_id))


class JobControl(Protocol):
    """The primitives `requeue_with_changes` is built from; each backend has them."""

    def job(self, job_id: str) -> JobRecord: ...
    def requeue(self, job_id: str, hold: bool = False) -> None: ...
    def hold(self, job_id: str) -> None: ...
    def release(self, job_id: str) -> None: ...
    def update_job(self, job_id: str, changes: JobChanges) -> None: ...
    def resubmit(self, job_id: str, changes: JobChanges, comment: str | None = None) -> str: ...
    def find_resubmission(self, job_id: str, incident_id: int | None = None) -> str | None: ...


def requeue_with_changes(
    ops: JobControl,
    job_id: str,
    changes: JobChanges,
    *,
    incident_id: int | None = None,
    resume_held: bool = False,
) -> RequeueResult:
    """Run a job again with `changes`, never letting it start before they are applied.

    In place: hold (requeuehold; a pending job is only held: Slurm will not requeue it), update,
    release. A failed update leaves the job held (JobLeftHeld says how to release it). With env
    changes: Slurm cannot change a job's environment, so its batch script is submitted again,
    tagged with `resubmit_comment`; an existing tagged job is returned instead of a second one.
    `resume_held`: a held job was held by an interrupted earlier call, so finish it.
    """
    job_id = validate_job_id(job_id)
    changes = validate_job_changes(changes)
    if changes.env:
        return _resubmit_once(ops, job_id, changes, incident_id)
    steps = [_hold_for_change(ops, job_id, resume_held)]
    for what, part in _update_parts(changes):
        try:
            ops.update_job(job_id, part)
        except ClusterError as exc:
            raise left_held(job_id, f"setting {what}", exc) from exc
        steps.append(what)
    try:
        ops.release(job_id)
    except ClusterError as exc:
        raise left_held(job_id, f"the release after {', '.join(steps)}", exc) from exc
    steps.append("released")
    return RequeueResult(
        job_id=job_id, run_job_id=job_id, mode=RequeueMode.IN_PLACE, changes=changes, steps=steps,
        resumed=steps[0] == _RESUMED,
    )


_RESUMED = "held by an interrupted run"


def _hold_for_change(ops: JobControl, job_id: str, resume_held: bool) -> str:
    record = ops.job(job_id)
    if record.is_held:
        if resume_held:
            return _RESUMED
        raise ClusterError(
            f"job {job_id} is already held ({record.reason}), not by this Pitstop action: left "
            f"as it is for whoever held it (`scontrol release {job_id}` lets it run)"
        )
    if record.state == "PENDING":
        ops.hold(job_id)  # Slurm refuses to requeue a pending job; held, it cannot start either
        return "held while pending"
    ops.requeue(job_id, hold=True)
    return "held"


def _update_parts(changes: JobChanges) -> list[tuple[str, JobChanges]]:
    """One update per setting, so a failure names the one Slurm refused."""
    parts = []
    if changes.exclude_nodes:
        nodes = ",".join(changes.exclude_nodes)
        parts.append((f"ExcNodeList={nodes}", JobChanges(exclude_nodes=changes.exclude_nodes)))
    if changes.time_limit_min:
        limit = changes.time_limit_min
        parts.append((f"TimeLimit={limit}", JobChanges(time_limit_min=limit)))
    return parts


def _resubmit_once(
    ops: JobControl, job_id: str, changes: JobChanges, incident_id: int | None
) -> RequeueResult:
    result = dict(job_id=job_id, mode=RequeueMode.RESUBMITTED, changes=changes)
    found = ops.find_resubmission(job_id, incident_id)
    if found is not None:
        return RequeueResult(
            **result, run_job_id=found, steps=["found the earlier resubmission"], resumed=True
        )
    record = ops.job(job_id)
    if record.state not in ENDED_STATES:
        raise ClusterError(
            f"job {job_id} is {record.state}: an environment change needs a new submission of its "
            f"batch script, and the old job would run as well. Cancel it first (scancel "
            f"{job_id}) or drop the env change"
        )
    new_id = ops.resubmit(job_id, changes, comment=resubmit_comment(job_id, incident_id))
    return RequeueResult(**result, run_job_id=new_id, steps=["resubmitted"])


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
    def resubmit(self, job_id: str, changes: JobChanges, comment: str | None = None) -> str: ...
    def requeue_with_changes(
        self, job_id: str, changes: JobChanges, *, incident_id: int | None = None,
        resume_held: bool = False,
    ) -> RequeueResult:
        """Run the job again with `changes`, atomically: see `requeue_with_changes` above."""
        ...
    def find_resubmission(self, job_id: str, incident_id: int | None = None) -> str | None:
        """The id of a job Pitstop submitted to replace `job_id` (for this incident), if any."""
        ...
    def topology(self) -> dict[str, list[str]]:
        """Leaf switch -> the nodes cabled to it; {} when the scheduler knows no topology."""
        ...


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
