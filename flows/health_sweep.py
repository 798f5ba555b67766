"""health_sweep: `pitstop node-check` on every node by fan-out, one Prefect task per batch.

Results are stored as node events; each failing node raises a `pitstop.node.alarm` event
(spooled, so a Prefect outage delays it instead of losing it; deployments turn it into a
node_alarm run); a node failing again and again is flagged as a repeat offender. Progress is a
Prefect progress artifact. Nodes a human drained, and nodes Slurm already has DOWN, are left out.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel, Field

from pitstop.cluster.base import NodeInfo
from pitstop.models import CheckStatus
from pitstop.policy.safety import Owner, drain_owner
from tasks import journal
from tasks.context import PipelineContext, build_context
from tasks.evidence import failure_text, parse_node_check
from tasks.xids import XidAlarm, count_node_xids

# Xids are counted once in the store by tasks.xids (the flows' one counting path); node-check's
# own `xid` result follows a node-local watermark and would double-count or miss, so it is
# not used to judge a node here.
NOT_JUDGED_BY_SWEEP = frozenset({"xid"})

ALARM = "health_check_failed"


class NodeResult(BaseModel):
    node: str
    overall: str = Field(description="OK | WARN | FAIL | UNREACHABLE")
    summary: str
    failing_checks: list[str] = Field(default_factory=list)


class SweepReport(BaseModel):
    partition: str | None = None
    checked: int
    batches: int
    failing: list[NodeResult] = Field(default_factory=list)
    unreachable: list[NodeResult] = Field(default_factory=list)
    skipped: dict[str, str] = Field(default_factory=dict, description="node -> why not checked")
    repeat_offenders: dict[str, str] = Field(default_factory=dict, description="node -> why flagged")
    alarms: dict[str, str] = Field(default_factory=dict, description="node -> delivery of its alarm")
    xid_alarms: list[XidAlarm] = Field(default_factory=list, description="Xids counted for the first time")
    xid_problems: dict[str, str] = Field(default_factory=dict, description="node -> why its Xids were not counted")
    flow_run_id: str | None = None


@task(name="check-batch", cache_policy=NO_CACHE, task_run_name="check-{nodes[0]}+{n_more}")
def check_batch(ctx: PipelineContext, nodes: list[str], n_more: int) -> list[NodeResult]:
    """One batch: the runner fans out within it (bounded by ssh.max_concurrency)."""
    p = ctx.settings.pipeline
    out = []
    for res in ctx.runner.fan_out(nodes, p.node_check_argv, p.node_check_timeout_s):
        report, why = parse_node_check(res.stdout, res.status, failure_text(res))
        if report is None:
            out.append(NodeResult(node=res.host, overall="UNREACHABLE", summary=why or "no answer"))
            continue
        bad = [f"{c.name}: {c.summary}" for c in report.checks
               if c.status is CheckStatus.FAIL and c.name not in NOT_JUDGED_BY_SWEEP]
        warn = any(c.status is CheckStatus.WARN for c in report.checks if c.name not in NOT_JUDGED_BY_SWEEP)
        overall = "FAIL" if bad else ("WARN" if warn else "OK")
        out.append(NodeResult(node=res.host, overall=overall, summary="; ".join(bad) or "ok",
                              failing_checks=bad))
    journal.record_checks(ctx, [(r.node, r.overall, r.summary) for r in out])
    return out


def raise_xid_alarm(ctx: PipelineContext, alarm: XidAlarm) -> str:
    """Spool and deliver a node alarm for an Xid counted for the first time."""
    from pitstop.events.hooks import spool_and_deliver
    from pitstop.events.models import NodeAlarm

    event = NodeAlarm(cluster=ctx.cluster_name, node=alarm.node, alarm=alarm.alarm, source="sweep",
                      summary=f"health sweep: new {alarm.alarm} in the kernel log"[:300], details=alarm.details)
    return spool_and_deliver(event.to_wire(), ctx.settings)


@task(name="count-xids", cache_policy=NO_CACHE)
def count_xids(ctx: PipelineContext, nodes: list[str]) -> tuple[dict[str, list[XidAlarm]], dict[str, str]]:
    return count_node_xids(ctx, nodes)


def raise_alarm(ctx: PipelineContext, result: NodeResult, repeat_why: str | None) -> str:
    """A node-alarm event with a stable id (one per node and minute), spooled then delivered."""
    from pitstop.events.hooks import spool_and_deliver
    from pitstop.events.models import NodeAlarm

    alarm = NodeAlarm(
        cluster=ctx.cluster_name, node=result.node, alarm=ALARM, source="sweep",
        summary=f"health sweep: {result.summary}"[:300],
        details={"lines": result.failing_checks[:20], "repeat_offender": repeat_why or ""},
    )
    return spool_and_deliver(alarm.to_wire(), ctx.settings)


def _left_out(nodes: list[NodeInfo]) -> dict[str, str]:
    skipped = {}
    for n in nodes:
        if n.is_down:
            skipped[n.name] = f"Slurm has it {n.state} ({n.reason or 'no reason'}): node_alarm's business"
        elif drain_owner(n) is Owner.FOREIGN:
            # A human-set drain is the human's business: do not probe it into an alarm.
            skipped[n.name] = f"drained by someone else ({n.reason or 'no reason'})"
    return skipped


@flow(name="health-sweep", flow_run_name="health-sweep-{partition}",
      task_runner=ThreadPoolTaskRunner(max_workers=4))
def health_sweep(partition: str | None = None) -> SweepReport:
    ctx = build_context()
    try:
        return _sweep(ctx, partition)
    finally:
        ctx.close()


def _sweep(ctx: PipelineContext, partition: str | None) -> SweepReport:
    log = get_run_logger()
    p = ctx.settings.pipeline
    nodes = ctx.scheduler.nodes(partition)
    skipped = _left_out(nodes)
    names = [n.name for n in nodes if n.name not in skipped]
    batches = [names[i:i + p.sweep_batch_size] for i in range(0, len(names), p.sweep_batch_size)]
    report = SweepReport(partition=partition, checked=0, batches=len(batches), skipped=skipped,
                         flow_run_id=ctx.flow_run_id)
    progress = create_progress_artifact(0.0, description=f"health sweep of {len(names)} nodes in {len(batches)} batches")
    results: list[NodeResult] = []
    # At most sweep_parallel_batches batches in flight; the task runner's pool bounds it too.
    for start in range(0, len(batches), p.sweep_parallel_batches):
        wave = batches[start:start + p.sweep_parallel_batches]
        futures = [check_batch.submit(ctx, b, len(b) - 1) for b in wave]
        for future in futures:
            results += future.result()
        update_progress_artifact(progress, 100.0 * min(len(batches), start + len(wave)) / max(1, len(batches)))
    report.checked = len(results)
    reachable = [r.node for r in results if r.overall != "UNREACHABLE"]
    xid_alarms, report.xid_problems = count_xids(ctx, reachable) if reachable else ({}, {})
    since = datetime.now(timezone.utc) - timedelta(hours=p.sweep_repeat_window_h)
    for r in results:
        if r.overall == "UNREACHABLE":
            report.unreachable.append(r)
            continue
        if r.overall != "FAIL":
            continue
        report.failing.append(r)
        failures = journal.check_failures_since(ctx, r.node, since)
        repeat_why = None
        if failures >= p.sweep_repeat_failures:
            repeat_why = f"failed {failures} health sweeps in {p.sweep_repeat_window_h:g} h"
            report.repeat_offenders[r.node] = repeat_why
            journal.flag_repeat_offender(ctx, r.node, repeat_why)
        if r.node in xid_alarms:
            # One fault, one alarm: the new Xid's alarm carries the failing checks as evidence,
            # so the ladder and damping see one occurrence, not two incidents.
            for alarm in xid_alarms[r.node]:
                alarm.details["lines"] = (alarm.details["lines"] + r.failing_checks)[:20]
                alarm.details["repeat_offender"] = repeat_why or ""
            continue
        report.alarms[r.node] = raise_alarm(ctx, r, repeat_why)
    for node, alarms in sorted(xid_alarms.items()):
        for alarm in alarms:
            report.xid_alarms.append(alarm)
            report.alarms[f"{node}:{alarm.alarm}"] = raise_xid_alarm(ctx, alarm)
    log.info("health sweep: %d checked, %d failing, %d unreachable, %d skipped, %d repeat offenders",
             report.checked, len(report.failing), len(report.unreachable), len(skipped), len(report.repeat_offenders))
    return report
