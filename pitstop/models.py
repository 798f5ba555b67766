"""Typed models shared across layers (classifiers, tasks, flows, CLI).

Kept free of I/O and heavy imports: `pitstop run` and `pitstop classify` load this on their
fast path.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class Cause(StrEnum):
    """The root cause an operator acts on. Exactly one per verdict."""

    GPU_HARDWARE = "gpu_hardware"
    GPU_MEMORY = "gpu_memory"
    NCCL_TIMEOUT = "nccl_timeout"
    NETWORK_FABRIC = "network_fabric"
    CUDA_OOM = "cuda_oom"
    HOST_OOM = "host_oom"
    NUMERICAL = "numerical"
    SOFTWARE_BUG = "software_bug"
    ENVIRONMENT = "environment"
    STORAGE_IO = "storage_io"
    TIME_LIMIT = "time_limit"
    PREEMPTED = "preempted"
    NODE_FAILURE = "node_failure"
    CRASH_SIGNAL = "crash_signal"
    SUCCESS = "success"
    UNKNOWN = "unknown"


# A verdict whose signature starts with this is the learned model leaning, below the precision an
# action needs (classifiers.learned): the remediation policy reports it and never acts on it.
GUESS_SIGNATURE_PREFIX = "learned-guess:"


class Evidence(BaseModel):
    """One line that decided a verdict. `line` is 1-based within `source`."""

    model_config = ConfigDict(frozen=True)

    line: int = Field(ge=0, description="1-based line number; 0 for a fact that is not a line")
    text: str
    source: str = Field(default="log", description="log | kernel | scheduler | <path>")


class Alternative(BaseModel):
    """Another cause the same log could mean, and the evidence that would tell the two apart."""

    cause: Cause
    confidence: float = Field(ge=0.0, le=1.0)
    signature: str = Field(default="", description="the rule that points there; empty when only the ambiguity table does")
    tells_apart: str = Field(description="what to look at to decide between the verdict and this cause")
    settled_by: str | None = Field(
        default=None, description="the node evidence that settles it automatically (classifiers.ambiguity.NodeTest)")


class Verdict(BaseModel):
    """Why a job (or wrapped command) ended the way it did."""

    cause: Cause
    signature: str = Field(description="stable id of the matched pattern, e.g. xid-79")
    confidence: float = Field(ge=0.0, le=1.0)
    evidence: list[Evidence] = Field(default_factory=list)
    hint: str = Field(default="", description="one-line operator hint for this signature")
    alternatives: list[Alternative] = Field(
        default_factory=list, description="other causes, most likely first, with what would tell them apart")
    decided_by: str = Field(
        default="", description="what settled an ambiguous verdict (node kernel logs, node checks), or why it is open")

    @property
    def is_failure(self) -> bool:
        return self.cause is not Cause.SUCCESS


class SchedulerFacts(BaseModel):
    """What the scheduler says about how a job ended. Every field is optional."""

    state: str | None = Field(default=None, description="Slurm state, e.g. FAILED, TIMEOUT")
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None


class CheckStatus(StrEnum):
    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"
    UNAVAILABLE = "UNAVAILABLE"  # the tool or driver is missing here: not a verdict on the node


class CheckResult(BaseModel):
    """One local check on a node (NVML, Xid, IB, disk, DCGM...)."""

    name: str
    status: CheckStatus
    summary: str = Field(description="one line a tired operator can act on")
    details: dict = Field(default_factory=dict)


class NodeCheckReport(BaseModel):
    """What `pitstop node-check --json` prints: every local check and one overall verdict."""

    node: str
    checked_at: str = Field(description="ISO-8601 UTC time of the check")
    overall: CheckStatus = Field(description="OK | WARN | FAIL (UNAVAILABLE checks count as OK)")
    checks: list[CheckResult] = Field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return {CheckStatus.OK: 0, CheckStatus.WARN: 1, CheckStatus.FAIL: 2}.get(self.overall, 0)
