"""health_sweep: `pitstop node-check` on every node by fan-out, one Prefect task per batch.

Results are stored as node events; each failing node raises a `pitstop.node.alarm` event
(spooled, so a Prefect outage delays it instead of losing it; deployments turn it into a
node_alarm run); a node failing again and again is flagged as a repeat offender. Progress is a
Prefect progress artifact. Nodes a human drained, and nodes Slurm already has DOWN, are left out.

Silent stragglers: every node's report also carries its GPUs' telemetry (clocks, throttle
reasons, power, temperature, PCIe width, NVLink and ECC counters); the sweep compares them across
the fleet (pitstop.node.stragglers), stores the flags (`straggler` node events, shown by
`pitstop nodes`) and raises a `straggler` alarm for a node when it is newly flagged or flagged
for something else. A failing node's own alarm carries its straggler lines instead.
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
from pitstop.node.stragglers import (
    Flag,
    NodeTelemetry,
    StragglerReport,
    alarm_cause,
    find_stragglers,
    node_summary,
    telemetry_from_report,
)
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
STRAGGLER_ALARM = "straggler"


class NodeResult(BaseModel):
    node: str
    overall: str = Field(description="OK | WARN | FAIL | UNREACHABLE")
    summary: str
    failing_checks: list[str] = Field(default_factory=list)
    telemetry: NodeTelemetry | None = Field(default=None, exclude=True,
                                            description="what straggler detection compares (not in the report)")


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
    stragglers: StragglerReport | None = Field(default=None, description="None: straggler detection is off")
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
                              failing_checks=bad, telemetry=telemetry_from_report(report)))
    journal.record_checks(ctx, [(r.node, r.overall, r.summary) for r in out])
    return out


def _flag_key(flags: list[Flag]) -> str:
    # what was flagged, not the numbers: a GPU that stays at x8 is one alarm, not one per sweep
    return ",".join(sorted({f"{'node' if f.gpu is None else f.gpu}/{f.signal}" for f in flags}))


def raise_straggler_alarm(ctx: PipelineContext, node: str, flags: list[Flag]) -> str:
    from pitstop.events.hooks import spool_and_deliver
    from pitstop.events.models import NodeAlarm

    cause, signature = alarm_cause(flags)
    event = NodeAlarm(
        cluster=ctx.cluster_name, node=node, alarm=STRAGGLER_ALARM, source="sweep",
        summary=f"health sweep: straggler: {node_summary(flags)}"[:300],
        details={"cause": cause.value, "signature": signature, "confidence": 0.8,
                 "lines": [f.why for f in flags][:20], "flags": [f.model_dump(mode="json") for f in flags][:40]},
    )
    return spool_and_deliver(event.to_wire(), ctx.settings)


@task(name="find-stragglers", cache_policy=NO_CACHE)
def flag_stragglers(ctx: PipelineContext, results: list[NodeResult]) -> tuple[StragglerReport, list[str]]:
    """Compare the fleet and store each node's flag (or its clearing). Returns the flags and the
    nodes whose flag is new or changed since the last sweep (the ones worth an alarm)."""
    from pitstop.store import records

    seen = [r.telemetry for r in results if r.telemetry is not None]
    found = find_stragglers(seen, ctx.settings.stragglers)
    flagged = found.by_node()
    # one read of the current flags; the store is written only where a flag changes
    current = {node: e.state for (_, node), e in records.node_stragglers(ctx.store, ctx.cluster_name).items()}
    changed = []
    for t in seen:
        flags = flagged.get(t.node)
        if flags and current.get(t.node) == f"flagged:{_flag_key(flags)}":
            found.notes.append(f"{t.node}: flagged for the same reason(s) as at the last sweep: no new alarm")
        elif flags or t.node in current:
            if records.set_node_straggler(ctx.store, ctx.cluster_name, t.node,
                                          node_summary(flags, limit=6) if flags else None,
                                          key=_flag_key(flags) if flags else ""):
                changed.append(t.node)
    return found, changed


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
    straggling: dict[str, list[Flag]] = {}
    if ctx.settings.stragglers.enabled:
        report.stragglers, changed = flag_stragglers(ctx, results)
        straggling = {node: flags for node, flags in report.stragglers.by_node().items() if node in changed}
    for r in results:
        if r.node in straggling and r.overall == "FAIL":
            # one node, one alarm: its failing checks' alarm carries the straggler evidence too
            r.failing_checks = r.failing_checks + [f"straggler: {f.why}" for f in straggling.pop(r.node)]
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
    for node, flags in sorted(straggling.items()):
        if node in xid_alarms:
            for alarm in xid_alarms[node]:
                alarm.details["lines"] = (alarm.details["lines"] + [f"straggler: {f.why}" for f in flags])[:20]
            continue
        report.alarms[f"{node}:{STRAGGLER_ALARM}"] = raise_straggler_alarm(ctx, node, flags)
    for node, alarms in sorted(xid_alarms.items()):
        for alarm in alarms:
            report.xid_alarms.append(alarm)
            report.alarms[f"{node}:{alarm.alarm}"] = raise_xid_alarm(ctx, alarm)
    log.info("health sweep: %d checked, %d failing, %d unreachable, %d skipped, %d repeat offenders, %d stragglers",
             report.checked, len(report.failing), len(report.unreachable), len(skipped), len(report.repeat_offenders),
             len(report.stragglers.by_node()) if report.stragglers else 0)
    return report
