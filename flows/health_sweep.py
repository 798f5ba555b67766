"""health_sweep: `pitstop node-check` on every node by fan-out, one Prefect task per batch.

Failing nodes raise a `pitstop.node.alarm` event (deployments turn it into node_alarm runs);
results are kept as node events. Progress is a Prefect progress artifact.
"""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, Field

from pitstop.cluster.base import NodeInfo
from pitstop.models import CheckStatus
from pitstop.store.tables import NodeEvent
from tasks.context import PipelineContext, build_context
from tasks.evidence import parse_node_check


class NodeResult(BaseModel):
    node: str
    overall: str
    summary: str
    failing_checks: list[str] = Field(default_factory=list)


class SweepReport(BaseModel):
    checked: int
    failing: list[NodeResult] = Field(default_factory=list)
    unreachable: list[NodeResult] = Field(default_factory=list)
    skipped_foreign: list[str] = Field(default_factory=list)
    events_emitted: int = 0


@task(name="check-batch", cache_policy=NO_CACHE, task_run_name="check-{nodes[0]}-and-{n_more}-more")
def check_batch(ctx: PipelineContext, nodes: list[str], n_more: int) -> list[NodeResult]:
    p = ctx.settings.pipeline
    out = []
    for res in ctx.runner.fan_out(nodes, p.node_check_argv, p.node_check_timeout_s):
        report, why = parse_node_check(res.stdout, res.status, res.error)
        if report is None:
            out.append(NodeResult(node=res.host, overall="UNREACHABLE", summary=why or "no answer"))
            continue
        bad = [f"{c.name}: {c.summary}" for c in report.checks if c.status is CheckStatus.FAIL]
        out.append(NodeResult(node=res.host, overall=str(report.overall), summary="; ".join(bad) or "ok", failing_checks=bad))
    with ctx.store.session() as session:
        for r in out:
            session.add(NodeEvent(cluster=ctx.cluster_name, node=r.node, kind="check", state=r.overall, detail=r.summary[:500]))
        session.commit()
    return out


def emit_alarm(ctx: PipelineContext, result: NodeResult) -> bool:
    from prefect.events import emit_event

    event = emit_event(
        event="pitstop.node.alarm",
        resource={"prefect.resource.id": f"pitstop.node.{ctx.cluster_name}.{result.node}"},
        payload={"node": result.node, "alarm": "health_check_failed",
                 "details": {"lines": result.failing_checks, "key": f"sweep-{ctx.flow_run_id}"}},
    )
    return event is not None


@flow(name="health-sweep", flow_run_name="health-sweep-{partition}")
def health_sweep(partition: str | None = None) -> SweepReport:
    ctx = build_context()
    nodes: list[NodeInfo] = [n for n in ctx.scheduler.nodes(partition) if not n.is_down]
    # A human-set drain is the human's business: do not probe it into an alarm.
    foreign = [n.name for n in nodes if n.is_drained and not (n.reason or "").startswith("pitstop:")]
    names = [n.name for n in nodes if n.name not in foreign]
    size = ctx.settings.pipeline.sweep_batch_size
    batches = [names[i:i + size] for i in range(0, len(names), size)]
    progress = create_progress_artifact(0.0, description=f"health sweep of {len(names)} nodes")
    results: list[NodeResult] = []
    futures = [check_batch.submit(ctx, b, len(b) - 1) for b in batches]
    for done, future in enumerate(futures, 1):
        results += future.result()
        update_progress_artifact(progress, 100.0 * done / max(1, len(futures)))
    report = SweepReport(checked=len(results), skipped_foreign=foreign)
    for r in results:
        if r.overall == "FAIL":
            report.failing.append(r)
            report.events_emitted += int(emit_alarm(ctx, r))
        elif r.overall == "UNREACHABLE":
            report.unreachable.append(r)
    return report
