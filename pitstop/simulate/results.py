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
    interruptions: int = Field(description="every unexpected stop of the job: fresh faults and repeats "
                                           "(planned job-chain restarts are not interruptions)")
    interruptions_by_category: dict[str, int]
    fresh_interruptions: int = Field(description="interruptions by a new fault of the configured process "
                                                 "(Table 5's rates): interruptions - repeat_failures")
    planned_restarts: int = Field(description="restarts between links of the job chain (the paper's planned "
                                              "interruptions: 47 in its 54 days); not interruptions")
    repeat_failures: int = Field(description="interruptions by a bad node the job was put back on")
    repeats_by_category: dict[str, int]
    human_restarts: int = Field(description="interruptions after which a person restarted the job")
    approvals: int = Field(description="steps that waited for a person's approval (mostly node work after "
                                       "the requeue: the job waits only for one asked before it)")
    approvals_denied: int = Field(description="approvals not answered in time (a deny)")
    needed_human: int = Field(description="interruptions (or stuck pending jobs) whose restart waited for a "
                                          "person: a restart by hand, an approval before the requeue")
    needed_human_by_category: dict[str, int] = Field(default_factory=dict)
    lost_gpu_hours: dict[str, float] = Field(description="by kind of loss (LOSS_KINDS)")
    lost_gpu_hours_by_cause: dict[str, float] = Field(description="by fault category that stopped the job")
    waiting_for_human_by_cause: dict[str, float] = Field(default_factory=dict,
                                                         description="the waiting_for_human loss, by category")
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
