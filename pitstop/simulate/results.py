"""What a simulation reports, per strategy and for the comparison: the models `--json` prints."""

from __future__ import annotations

from pydantic import BaseModel, Field

# Where lost time goes, in the order the table and the figure stack it.
LOSS_KINDS: tuple[str, ...] = (
    "lost_work",          # training since the last checkpoint, thrown away
    "pitstop_reaction",   # interruption -> requeue by automation (epilog, flow, Slurm)
    "waiting_for_human",  # a person had to notice, answer or restart
    "waiting_for_nodes",  # requeued, but the pool could not cover the job
    "restart",            # job start-up until training runs again
)
LOSS_LABELS = {
    "lost_work": "work since checkpoint",
    "pitstop_reaction": "automatic requeue",
    "waiting_for_human": "waiting for a human",
    "waiting_for_nodes": "waiting for nodes",
    "restart": "job restart",
}
PLANNED = "planned (job chain)"  # the cause of the restarts between links of the job chain


class StrategyResult(BaseModel):
    name: str
    label: str
    ettr: float = Field(description="productive GPU-hours / allocated GPU-hours")
    productive_gpu_hours: float
    allocated_gpu_hours: float
    interruptions: int
    interruptions_by_category: dict[str, int]
    repeat_failures: int = Field(description="interruptions by a bad node the job was put back on")
    repeats_by_category: dict[str, int]
    human_restarts: int = Field(description="interruptions after which a person restarted the job")
    approvals: int = Field(description="steps that waited for a person's approval")
    approvals_denied: int = Field(description="approvals not answered in time (a deny)")
    needed_human: int = Field(description="interruptions (or stuck pending jobs) a person had to act on")
    lost_gpu_hours: dict[str, float] = Field(description="by kind of loss (LOSS_KINDS)")
    lost_gpu_hours_by_cause: dict[str, float] = Field(description="by fault category that stopped the job")
    nodes_out_mean: float
    nodes_out_max: int
    nodes_out_hourly: list[int] = Field(description="nodes out of the pool at each hour of the run")
    decisions: int = Field(description="calls of pitstop.policy decide")
    events: int = Field(description="simulated events, decisions included")


class Comparison(BaseModel):
    source: str = Field(description="where the parameters come from")
    policy: str = Field(description="the policy file, or the built-in default")
    seed: int
    days: float
    job_nodes: int
    gpus: int
    spare_nodes: int
    expected_interruptions: float = Field(description="the configured rates over this run")
    verdicts: dict[str, str] = Field(description="category -> cause/signature the classifier gave its lines")
    strategies: list[StrategyResult]
    wall_seconds: float = 0.0

    @property
    def events(self) -> int:
        return sum(s.events for s in self.strategies)

    def by_name(self, name: str) -> StrategyResult:
        return next(s for s in self.strategies if s.name == name)
