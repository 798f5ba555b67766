"""Load what the pure policy needs (policy, mode, history, node view) and call `decide`."""

from __future__ import annotations

from datetime import datetime, timezone

from prefect import task
from prefect.cache_policies import NO_CACHE

from pitstop.cluster.base import ClusterError, JobRecord, NodeInfo
from pitstop.models import Verdict
from pitstop.policy.decide import Decision, decide
from pitstop.policy.history import History, PartitionState
from pitstop.policy.model import policy_from_settings
from pitstop.policy.safety import ModeState
from tasks.context import PipelineContext
from tasks import journal


def current_mode(ctx: PipelineContext) -> ModeState:
    """The run-time mode (`pitstop mode ...`) wins over the settings default."""
    return journal.mode_state(ctx)


def node_view(ctx: PipelineContext, names: list[str]) -> dict[str, NodeInfo]:
    view: dict[str, NodeInfo] = {}
    for name in names:
        try:
            view[name] = ctx.scheduler.node(name)
        except (ClusterError, ValueError):
            continue  # unknown/unreachable node: decide() treats it as unknown ownership
    return view


def partition_states(ctx: PipelineContext) -> tuple[dict[str, PartitionState], int, int]:
    try:
        all_nodes = ctx.scheduler.nodes()
    except ClusterError:
        return {}, 0, 0
    parts: dict[str, PartitionState] = {}
    for info in all_nodes:
        healthy = not (info.is_drained or info.is_down)
        for part in info.partitions or ["-"]:
            state = parts.setdefault(part, PartitionState(name=part, size=0, healthy=0))
            state.size += 1
            state.healthy += int(healthy)
    healthy_total = sum(1 for i in all_nodes if not (i.is_drained or i.is_down))
    return parts, len(all_nodes), healthy_total


@task(name="decide", cache_policy=NO_CACHE)
def decide_remediation(
    ctx: PipelineContext,
    incident_id: int,
    verdict: Verdict,
    job: JobRecord | None = None,
    node: str | None = None,
    faulty_nodes: list[str] | None = None,
) -> Decision:
    involved = sorted(set((job.nodes if job else []) + ([node] if node else []) + (faulty_nodes or [])))
    partitions, size, healthy = partition_states(ctx)
    history: History = journal.load_history(ctx, verdict, job=job, nodes=involved)
    history = history.model_copy(
        update={"partitions": partitions or history.partitions, "cluster_size": size or history.cluster_size,
                "cluster_healthy": healthy if size else history.cluster_healthy}
    )
    return decide(
        verdict,
        policy=policy_from_settings(ctx.settings),
        history=history,
        mode=current_mode(ctx),
        now=datetime.now(timezone.utc),
        incident_id=incident_id,
        job=job,
        node=node,
        nodes=node_view(ctx, involved),
        faulty_nodes=faulty_nodes,
        dry_run=ctx.dry_run,
    )
