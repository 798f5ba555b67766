"""Load what the pure policy needs (policy, mode, history, node view) and call `decide`."""

from __future__ import annotations

from datetime import datetime, timezone

from prefect import task
from prefect.cache_policies import NO_CACHE

from pitstop.cluster.base import ClusterError, JobRecord, NodeInfo
from pitstop.models import Verdict
from pitstop.policy.decide import Decision, PlannedAction, decide
from pitstop.policy.escalation import NodeEnd, StepOutcome, extend_decision, next_rung_steps, node_end_states
from pitstop.policy.model import ActionKind, policy_from_settings
from tasks import journal
from tasks.context import PipelineContext


def cluster_nodes(ctx: PipelineContext) -> list[NodeInfo]:
    """The whole cluster's nodes (partition sizes for the blast radius); [] if unreadable."""
    try:
        return ctx.scheduler.nodes()
    except ClusterError:
        return []  # the guards then count only what the journal knows, and say so in notes


def node_view(all_nodes: list[NodeInfo], ctx: PipelineContext, names: list[str]) -> dict[str, NodeInfo]:
    known = {n.name: n for n in all_nodes}
    view: dict[str, NodeInfo] = {}
    for name in names:
        if name in known:
            view[name] = known[name]
            continue
        try:
            view[name] = ctx.scheduler.node(name)
        except (ClusterError, ValueError):
            continue  # unknown/unreachable node: decide() treats it as unknown ownership
    return view


@task(name="decide", cache_policy=NO_CACHE)
def decide_remediation(
    ctx: PipelineContext,
    incident_id: int,
    verdict: Verdict,
    job: JobRecord | None = None,
    node: str | None = None,
    faulty_nodes: list[str] | None = None,
    suspect_nodes: list[str] | None = None,
) -> Decision:
    involved = sorted(set((job.nodes if job else []) + ([node] if node else []) + (faulty_nodes or [])))
    everything = cluster_nodes(ctx)
    policy = policy_from_settings(ctx.settings)
    history = journal.load_history(ctx, incident_id, verdict, job, involved, everything,
                                   recent_minutes=policy.switch_storm.window_minutes)
    if verdict.cause in policy.switch_storm.causes:
        history.switches = leaves_of(ctx, involved)
    decision = decide(
        verdict,
        policy=policy,
        history=history,
        mode=journal.mode_state(ctx),
        now=datetime.now(timezone.utc),
        incident_id=incident_id,
        job=job,
        node=node,
        nodes=node_view(everything, ctx, involved),
        faulty_nodes=faulty_nodes,
        suspect_nodes=suspect_nodes,
        dry_run=ctx.dry_run,
    )
    if not everything:
        decision.notes.append("the scheduler's node list was unreadable: partition limits not checked")
    if decision.switch_storm is not None and not ctx.dry_run:
        join_fabric_incident(ctx, incident_id, decision, policy.switch_storm.window_minutes)
    journal.record_decision_effects(ctx, incident_id, decision)
    return decision


def leaves_of(ctx: PipelineContext, nodes: list[str]) -> dict[str, list[str]]:
    """The leaf switches of `nodes` with all their members; {} when the scheduler has no
    topology (or cannot say): the switch-storm check then stays quiet."""
    read = getattr(ctx.scheduler, "topology", None)
    if read is None or not nodes:
        return {}
    try:
        leaves = read()
    except ClusterError:
        return {}
    wanted = set(nodes)
    return {leaf: members for leaf, members in leaves.items() if wanted & set(members)}


def join_fabric_incident(ctx: PipelineContext, incident_id: int, decision: Decision, window_minutes: float) -> None:
    """This failure joins its switch's fabric incident; only the flow that opened it tells ops
    (one notice per storm, not one per job)."""
    storm = decision.switch_storm
    sid, opened = journal.join_switch_incident(ctx, incident_id, storm, window_minutes)
    storm.fabric_incident_id, storm.opened_here = sid, opened
    if opened:
        decision.notes.append(f"opened fabric incident {sid} for switch {storm.switch}: ops are told once, here")
        return
    decision.notes.append(f"joined fabric incident {sid} of switch {storm.switch}: ops were told there")
    kept = [a for a in decision.actions if a.kind is not ActionKind.NOTIFY_OPS]
    if not kept:
        kept = [PlannedAction(seq=0, kind=ActionKind.NONE, target="-", target_type="people")]
    for i, a in enumerate(kept):
        a.seq = i
    decision.actions = kept


def journal_outcomes(ctx: PipelineContext, incident_id: int) -> dict[int, StepOutcome]:
    """The action journal as the escalation logic reads it."""
    return {e.seq: StepOutcome.from_journal(e.state, e.params) for e in journal.entries(ctx, incident_id)}


@task(name="escalate", cache_policy=NO_CACHE)
def escalate_remediation(ctx: PipelineContext, incident_id: int, decision: Decision, job: JobRecord | None = None) -> list[PlannedAction]:
    """The next ladder rung for every node the plan did not fix, appended to `decision` through
    the same guards; [] when every node is back, ticketed, waiting for a human, or out of rungs."""
    policy = policy_from_settings(ctx.settings)
    steps = next_rung_steps(decision, policy, journal_outcomes(ctx, incident_id))
    if not steps:
        return []
    nodes = sorted({s.target for s in steps})
    verdict = Verdict(cause=decision.cause, signature=decision.signature, confidence=decision.confidence)
    everything = cluster_nodes(ctx)
    history = journal.load_history(ctx, incident_id, verdict, job, nodes, everything)
    added = extend_decision(decision, steps, policy=policy, history=history, mode=journal.mode_state(ctx),
                            now=datetime.now(timezone.utc), job=job, nodes=node_view(everything, ctx, nodes),
                            dry_run=ctx.dry_run)
    rule = policy.rule_for(decision.cause, decision.signature, decision.job_ran_minutes)
    for step in added:
        if step.rung is not None and rule is not None and rule.ladder and not ctx.dry_run:
            journal.record_rung(ctx, step.target, rule.ladder, step.rung, incident_id)  # `pitstop nodes`
    return added


def end_states(ctx: PipelineContext, incident_id: int, decision: Decision) -> list[NodeEnd]:
    return node_end_states(decision, policy_from_settings(ctx.settings), journal_outcomes(ctx, incident_id))
