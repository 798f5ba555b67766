"""The simulation's parameters: pydantic models, loaded from YAML (the Llama 3 defaults ship as
package data, `llama3.yaml`, with the source of every number next to it).

Time units are in the field names (`_minutes`, `_hours`, `_days`). Fault counts are stated for a
reference run (the paper's 54 days on 2,048 nodes) and scale with the simulated nodes and days.
"""

from __future__ import annotations

from enum import StrEnum
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DEFAULT_PARAMS_RESOURCE = "llama3.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Need(StrEnum):
    """What a node really needs after a fault: hidden from Pitstop, it decides the diag outcomes."""

    NONE = "none"  # the node is fine (the job's own bug, a switch elsewhere)
    RESET = "reset"  # a GPU reset (or anything stronger) clears it
    REBOOT = "reboot"  # a reboot (or a repair) clears it
    REPLACE = "replace"  # only a repair or an RMA clears it


# How strong each fix is: a fix clears every need at or below its strength.
STRENGTH = {Need.NONE: 0, Need.RESET: 1, Need.REBOOT: 2, Need.REPLACE: 3}


class Blame(StrEnum):
    """Which node the evidence names, as classifiers/suspects.py places it for these lines."""

    HARDWARE = "hardware"  # the node's own kernel log or the scheduler (NODE_FAIL): acted on
    SUSPECT = "suspect"  # only the job's log names the node: excluded from the requeue only
    NONE = "none"  # nobody: a plain traceback, a NaN loss


class Repair(StrEnum):
    RMA = "rma"  # a part goes back to the vendor: `rma_days`
    ONSITE = "onsite"  # a technician fixes it in the rack: `onsite_repair_hours`


class LogLines(_Strict):
    """The representative evidence of one category: a demo fault by name, or lines given here."""

    demo_fault: str | None = Field(default=None, description="a name in pitstop.cluster.demo_faults")
    log_lines: list[str] = Field(default_factory=list)
    kernel_lines: list[str] = Field(default_factory=list)
    job_state: str = "FAILED"
    exit_code: int = 1

    @model_validator(mode="after")
    def _one_source(self) -> "LogLines":
        if self.demo_fault is None and not self.log_lines and not self.kernel_lines:
            raise ValueError("give demo_fault or some log_lines/kernel_lines")
        return self


class Category(_Strict):
    name: str = Field(pattern=r"^[a-z0-9_]+$")
    label: str
    count: float = Field(gt=0, description="interruptions in the reference run")
    source: str
    evidence: LogLines
    blame: Blame
    need: dict[Need, float] = Field(description="probability of each hidden need; sums to 1")
    repair: Repair = Repair.RMA
    node_down: bool = Field(default=False, description="Slurm marks the node DOWN (its own reason)")
    node_check_sees_replace: bool = Field(
        default=False,
        description="the node check that runs with every Pitstop diag (tasks/act.py _diag) fails a "
                    "part of this category that needs replacing, whatever the DCGM level: no "
                    "`diag_miss_below_level3` for it")

    @field_validator("need")
    @classmethod
    def _sums_to_one(cls, v: dict[Need, float]) -> dict[Need, float]:
        if not v or abs(sum(v.values()) - 1.0) > 1e-6 or any(p < 0 for p in v.values()):
            raise ValueError(f"need probabilities must be >= 0 and sum to 1, got {v}")
        return v


class Cluster(_Strict):
    job_nodes: int = Field(ge=1)
    gpus_per_node: int = Field(ge=1)
    spare_nodes: int = Field(ge=0)
    days: float = Field(gt=0)


class Reference(_Strict):
    """The run the category counts were observed on."""

    nodes: int = Field(ge=1)
    days: float = Field(gt=0)


class Run(_Strict):
    checkpoint_minutes: float = Field(gt=0)
    restart_minutes: float = Field(ge=0)
    job_time_limit_hours: float = Field(gt=0)
    pitstop_requeue_minutes: float = Field(ge=0)
    recurrence_minutes: float = Field(gt=0)


class NodeTimes(_Strict):
    step_minutes: dict[str, float] = Field(description="action kind -> minutes it keeps the node")
    diag_minutes: dict[int, float] = Field(description="diag level -> minutes")
    diag_miss_below_level3: float = Field(ge=0, le=1)
    rma_days: float = Field(gt=0)
    onsite_repair_hours: float = Field(gt=0)
    approval_timeout_minutes: float = Field(gt=0)


class Delay(_Strict):
    day_minutes: float = Field(ge=0)
    night_minutes: float = Field(ge=0)


class Humans(_Strict):
    day_start_hour: int = Field(ge=0, le=23)
    day_end_hour: int = Field(ge=1, le=24)
    notice_unaided: Delay = Field(description="until a human sees a failed job with no notification")
    notice_paged: Delay = Field(description="until a human reads Pitstop's notification")
    restart_minutes: float = Field(ge=0, description="to requeue by hand (and drain what they found)")
    diagnose_unaided_minutes: float = Field(ge=0)
    finds_bad_node: float = Field(ge=0, le=1, description="reading raw logs, finds the bad node")
    node_triage: Delay = Field(description="until ops look at a node left to them")


class SimParams(_Strict):
    source: str
    seed: int = 0
    cluster: Cluster
    reference: Reference
    run: Run
    node_times: NodeTimes
    humans: Humans
    categories: list[Category] = Field(min_length=1)

    @field_validator("categories")
    @classmethod
    def _unique(cls, v: list[Category]) -> list[Category]:
        names = [c.name for c in v]
        if len(names) != len(set(names)):
            raise ValueError("category names must be unique")
        return v

    @property
    def pool_nodes(self) -> int:
        return self.cluster.job_nodes + self.cluster.spare_nodes

    @property
    def horizon_minutes(self) -> float:
        return self.cluster.days * 24 * 60

    def rate_per_minute(self, c: Category) -> float:
        """The category's interruption rate for this job size (faults scale with the nodes)."""
        scale = self.cluster.job_nodes / self.reference.nodes
        return c.count * scale / (self.reference.days * 24 * 60)

    def expected_count(self, c: Category) -> float:
        return self.rate_per_minute(c) * self.horizon_minutes


def load_params(path: Path | str | None = None) -> SimParams:
    """The YAML at `path`, or the shipped Llama 3 defaults. Raises ValueError naming the file."""
    if path is None:
        text, source = resources.files("pitstop.simulate").joinpath(DEFAULT_PARAMS_RESOURCE).read_text("utf-8"), "(built-in llama3.yaml)"
    else:
        source = str(path)
        try:
            text = Path(path).expanduser().read_text("utf-8")
        except OSError as exc:
            raise ValueError(f"cannot read simulation parameters {source}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
        return SimParams.model_validate(data)
    except (yaml.YAMLError, ValueError) as exc:
        raise ValueError(f"invalid simulation parameters {source}: {exc}") from None
