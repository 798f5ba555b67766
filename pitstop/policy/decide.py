"""The decision function: verdict + subject + history + policy + mode -> an explained plan.

Pure: no clock, no store, no scheduler. The flow passes `now`, loads `History`, executes the
`Decision`'s actions in order and journals each one (`pitstop.store.records`).

Each `PlannedAction` says what to do and whether to do it:
  - `execute`: False means "would do" (observe mode, outside the canary, dry-run) or a final block;
  - `needs_approval`: pause for a human first (policy, or an approvable guard);
  - `blocked_by`: the guard that stopped the automatic path, with `blocked_why`.
`disposition` folds these into one of run | ask | would_do | blocked.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from pitstop.cluster.base import JobChanges, JobRecord, NodeInfo
from pitstop.models import GUESS_SIGNATURE_PREFIX, Cause, Verdict
from pitstop.policy.history import DrainRecord, History
from pitstop.policy.model import (
    ESCALATE,
    NODE_CHANGING,
    NODE_TARGETED,
    NOTIFYING,
    ActionKind,
    ActionTemplate,
    FaultBehaviour,
    Policy,
)
from pitstop.policy.safety import (
    APPROVABLE,
    Block,
    BreakerTrip,
    Damping,
    LadderPosition,
    ModeState,
    Owner,
    check_drain,
    damping_for,
    drain_owner,
    ladder_position,
    lemon_reasons,
    ownership_reason,
    partition_scope,
    CLUSTER_SCOPE,
)
from pitstop.policy.switch_storm import SwitchStorm, find_switch_storm

Disposition = Literal["run", "ask", "would_do", "blocked"]
TargetType = Literal["node", "job", "people"]


class PlannedAction(BaseModel):
    seq: int = Field(ge=0, description="position in the plan; the journal key with the incident")
    kind: ActionKind
    target: str = Field(description="node name, job id, 'ops', a user name, or '-'")
    target_type: TargetType
    reason: str | None = Field(default=None, description="drain/reboot reason (ownership prefix)")
    diag_level: int | None = None
    diag_checks: list[str] = Field(default_factory=list, description="diag: extra node checks, e.g. nccl")
    job_changes: JobChanges | None = None
    after_diag_passes: bool = Field(default=False, description="resume only if the diag passed")
    rung: int | None = Field(default=None, ge=0, description="0-based ladder rung this step is")
    needs_approval: bool = False
    approval_why: str = ""
    execute: bool = True
    would_do_why: str = ""
    blocked_by: Block | None = None
    blocked_why: str = ""

    @property
    def disposition(self) -> Disposition:
        if self.blocked_by is not None and self.blocked_by not in APPROVABLE:
            return "blocked"
        if not self.execute:
            return "would_do"
        return "ask" if self.needs_approval else "run"

    @property
    def journal_state(self) -> str:
        """The state an action record starts in (see `pitstop.store.records.ActionState`)."""
        return {
            "run": "intended",
            "ask": "awaiting_approval",
            "would_do": "would_do",
            "blocked": "skipped",
        }[self.disposition]

    def describe(self) -> str:
        what = f"{self.kind.value} {self.target}"
        if self.kind is ActionKind.DIAG and self.diag_level:
            what += f" (level {self.diag_level})"
        if self.kind is ActionKind.DIAG and self.diag_checks:
            what += f" with {', '.join(self.diag_checks)}"
        if self.after_diag_passes:
            what += " if the diagnostics pass"
        if self.job_changes is not None:
            parts = []
            if self.job_changes.exclude_nodes:
                parts.append("excluding " + ",".join(self.job_changes.exclude_nodes))
            if self.job_changes.time_limit_min:
                parts.append(f"time limit {self.job_changes.time_limit_min} min")
            if self.job_changes.env:
                parts.append("env " + " ".join(f"{k}={v}" for k, v in sorted(self.job_changes.env.items())))
            if parts:
                what += " (" + "; ".join(parts) + ")"
        if self.reason and self.kind in {ActionKind.DRAIN, ActionKind.REBOOT}:
            what += f' reason "{self.reason}"'
        d = self.disposition
        if d == "blocked":
            return f"NOT doing: {what} - {self.blocked_why}"
        if d == "would_do":
            tail = f" - {self.would_do_why}" if self.would_do_why else ""
            ask = f"; would need approval: {self.approval_why}" if self.needs_approval else ""
            return f"would do: {what}{tail}{ask}"
        if d == "ask":
            why = self.blocked_why if self.blocked_by is not None else self.approval_why
            return f"awaiting approval: {what} - {why}"
        return f"doing: {what}"


class Decision(BaseModel):
    incident_id: int | str | None
    cause: Cause
    signature: str
    confidence: float
    decided_by: str = Field(default="", description="the verdict's settling evidence, or why it is still open")
    alternatives: list[str] = Field(default_factory=list, description="other possible causes, most likely first")
    rule: str = Field(description="which rule matched, e.g. gpu_hardware:xid-79, or 'fallback'")
    rule_description: str = ""
    mode: str = Field(description="observe | canary (...) | act, as shown to people")
    dry_run: bool = False
    job_id: str | None = None
    node: str | None = None
    faulty_nodes: list[str] = Field(default_factory=list, description="acted on (hardware evidence)")
    suspect_nodes: list[str] = Field(default_factory=list, description="excluded from the requeue only")
    actions: list[PlannedAction] = Field(default_factory=list)
    ladder: dict[str, LadderPosition] = Field(default_factory=dict)
    damping: dict[str, Damping] = Field(default_factory=dict)
    lemon: dict[str, list[str]] = Field(default_factory=dict, description="node -> why a lemon")
    foreign_drains: dict[str, str] = Field(default_factory=dict, description="node -> reason")
    breaker_trips: list[BreakerTrip] = Field(default_factory=list)
    switch_storm: SwitchStorm | None = Field(default=None, description="this failure is one of a leaf switch's")
    job_ran_minutes: float | None = Field(default=None, description="the job's run before it failed, if known")
    notes: list[str] = Field(default_factory=list)
    decided_at: datetime

    @property
    def needs_approval(self) -> bool:
        return any(a.disposition == "ask" for a in self.actions)

    @property
    def changes_cluster(self) -> bool:
        return any(a.disposition in {"run", "ask"} and a.kind not in NOTIFYING for a in self.actions)

    def explain(self) -> list[str]:
        """Lines for notifications and `pitstop incidents`: what, why, and what is (not) done."""
        subject = ", ".join(
            x for x in [f"job {self.job_id}" if self.job_id else "", f"node {self.node}" if self.node else ""] if x
        ) or "no subject"
        lines = [
            f"{subject}: {self.cause.value} ({self.signature}, confidence {self.confidence:.2f})",
            *([f"decided by: {self.decided_by}"] if self.decided_by else []),
            *([f"could also be: {', '.join(self.alternatives)}"] if self.alternatives else []),
            f"mode: {self.mode}" + (" + dry-run" if self.dry_run else ""),
            f"rule: {self.rule}" + (f" - {self.rule_description}" if self.rule_description else ""),
        ]
        lines += [f"ladder {n}: {p.label()}, {p.recurrences} earlier in {p.window_hours:g} h" for n, p in self.ladder.items()]
        lines += [f"{n}: {d.explain()}" for n, d in self.damping.items()]
        lines += [f"LEMON {n}: " + "; ".join(why) for n, why in self.lemon.items()]
        lines += [f"{n} is drained by someone else ({r!r}): left alone" for n, r in self.foreign_drains.items()]
        lines += [f"BREAKER OPENED {t.scope}: {t.reason}" for t in self.breaker_trips]
        lines += self.notes
        lines += [f"{a.seq + 1}. {a.describe()}" for a in self.actions]
        return lines


# Causes that blame the node(s) a job ran on: with one node and no better evidence, blame it.
_NODE_CAUSES = frozenset({Cause.GPU_HARDWARE, Cause.GPU_MEMORY, Cause.NETWORK_FABRIC, Cause.NODE_FAILURE})


def job_run_minutes(job: JobRecord | None, now: datetime) -> float | None:
    """How long the job's last run lasted (Slurm's start time is the latest run's), if known."""
    if job is None or job.start_time is None:
        return None
    end = job.end_time or now
    if end.tzinfo is None or job.start_time.tzinfo is None:
        end, start = end.replace(tzinfo=None), job.start_time.replace(tzinfo=None)
    else:
        start = job.start_time
    return max(0.0, (end - start).total_seconds() / 60)


def _faulty(verdict: Verdict, job: JobRecord | None, node: str | None, faulty: list[str] | None) -> list[str]:
    if faulty is not None:
        return list(dict.fromkeys(faulty))
    if node is not None:
        return [node]
    if job is not None and len(job.nodes) == 1 and verdict.cause in _NODE_CAUSES:
        return list(job.nodes)
    return []


def decide(
    verdict: Verdict,
    *,
    policy: Policy,
    history: History,
    mode: ModeState,
    now: datetime,
    incident_id: int | str | None = None,
    job: JobRecord | None = None,
    node: str | None = None,
    nodes: dict[str, NodeInfo] | None = None,
    faulty_nodes: list[str] | None = None,
    suspect_nodes: list[str] | None = None,
    dry_run: bool = False,
) -> Decision:
    """Plan the remediation for one incident.

    `job`/`node` are the subject (a job incident, a node alarm, or both). `nodes` is the
    scheduler's current view of the nodes involved (for ownership and partitions).
    `faulty_nodes` are the nodes the evidence blames; by default the alarmed node, or a
    single-node job's node for node-level causes. Multi-node jobs without it drain nothing.
    `suspect_nodes` are nodes only the job's logs single out: a requeue excludes them, but no
    node action is taken on them.
    """
    nodes = nodes or {}
    ran = job_run_minutes(job, now)
    rule = policy.rule_for(verdict.cause, verdict.signature, ran)
    templates = rule.actions if rule else policy.fallback
    decision = Decision(
        incident_id=incident_id,
        cause=verdict.cause,
        signature=verdict.signature,
        confidence=verdict.confidence,
        decided_by=verdict.decided_by,
        alternatives=[f"{a.cause.value} ({a.confidence:.2f})" for a in verdict.alternatives],
        rule=rule.rule_id if rule else "fallback",
        rule_description=rule.description if rule else "no rule for this cause/signature",
        mode=mode.label(),
        dry_run=dry_run,
        job_id=job.job_id if job else None,
        node=node,
        job_ran_minutes=ran,
        decided_at=now,
    )
    involved = sorted({*(job.nodes if job else []), *([node] if node else []), *(faulty_nodes or [])})
    storm = None if verdict.signature.startswith(GUESS_SIGNATURE_PREFIX) else find_switch_storm(
        policy.switch_storm, history.switches, history.cluster_recent, verdict.cause, involved,
        job.job_id if job else None, now)
    if storm is not None:
        # one fabric incident owns the switch: no node of it is drained, reset or ticketed here
        decision.switch_storm = storm
        decision.notes += [storm.summary(), storm.drain_hint()]
        faulty_nodes = []
        suspect_nodes = list(dict.fromkeys([*(suspect_nodes or []), *storm.members]))
    blamed = _faulty(verdict, job, node, faulty_nodes)
    needs_node = any(t.kind == ESCALATE or t.kind in NODE_TARGETED for t in templates)
    if storm is None and needs_node and not blamed and suspect_nodes:
        decision.notes.append(
            "no node has hardware evidence: the requeue excludes the suspects, nothing is drained"
        )
    elif storm is None and needs_node and not blamed:
        decision.notes.append(
            "could not tell which node is at fault: no node action taken (ops should look)"
        )
    fault = policy.fault_for(verdict.signature)

    # Damping: a self-clearing fault below its threshold does nothing to that node.
    acting: list[str] = []
    for n in blamed:
        damp = damping_for(fault, verdict.signature, history.node_incidents.get(n, []), now)
        if damp is not None:
            decision.damping[n] = damp
            if damp.suppressed:
                continue
        acting.append(n)
    decision.faulty_nodes = acting
    decision.suspect_nodes = [n for n in dict.fromkeys(suspect_nodes or []) if n not in blamed]

    for n in acting:
        why = lemon_reasons(history.lemon_signals.get(n), policy.lemon)
        if why:
            decision.lemon[n] = why
        info = nodes.get(n)
        if drain_owner(info) is Owner.FOREIGN:
            decision.foreign_drains[n] = (info.reason or "") if info else ""

    steps = _expand(policy, rule, templates, verdict, job, acting, history, decision, now)
    steps = _enforce_sticky_and_lemon(fault, steps, acting, decision)
    if blamed and not acting and not job:
        # Only a damped node alarm: nothing to do, and nobody needs paging for it.
        steps = [s for s in steps if s.kind is not ActionKind.NOTIFY_OPS]
    if not steps:
        steps = [PlannedAction(seq=0, kind=ActionKind.NONE, target="-", target_type="people")]
    for i, s in enumerate(steps):
        s.seq = i
    apply_guards(policy, history, mode, now, job, nodes, steps, decision, dry_run)
    decision.actions = steps
    return decision


def make_node_step(t: ActionTemplate, node: str, reason: str, rung: int | None = None) -> PlannedAction:
    """One planned step aimed at a node (drain, reset, reboot, diag, resume, ticket)."""
    kind = ActionKind(t.kind)
    return PlannedAction(
        seq=0,
        rung=rung,
        kind=kind,
        target=node,
        target_type="node",
        reason=reason if kind in {ActionKind.DRAIN, ActionKind.REBOOT, ActionKind.GPU_RESET} else None,
        diag_level=(t.level or 1) if kind is ActionKind.DIAG else None,
        diag_checks=list(t.checks) if kind is ActionKind.DIAG else [],
        after_diag_passes=t.after_diag_passes if kind is ActionKind.RESUME else False,
    )


def _expand(
    policy: Policy,
    rule,
    templates: list[ActionTemplate],
    verdict: Verdict,
    job: JobRecord | None,
    acting: list[str],
    history: History,
    decision: Decision,
    now: datetime,
) -> list[PlannedAction]:
    reason = ownership_reason(verdict.cause, verdict.signature, decision.incident_id)
    steps: list[PlannedAction] = []

    def node_step(t: ActionTemplate, n: str, rung: int | None = None) -> PlannedAction:
        return make_node_step(t, n, reason, rung)

    for t in templates:
        if t.kind == ESCALATE:
            for n in acting:
                pos = ladder_position(policy, rule.ladder, history.node_incidents.get(n, []), now)
                decision.ladder[n] = pos
                steps.append(node_step(policy.ladders[rule.ladder].rungs[pos.rung], n, pos.rung))
        elif t.kind in NODE_TARGETED:
            steps.extend(node_step(t, n) for n in acting)
        elif t.kind is ActionKind.REQUEUE:
            if job is None:
                continue
            exclude = list(job.excluded_nodes)
            if t.exclude_faulty_nodes:
                exclude += [n for n in acting + decision.suspect_nodes if n not in exclude]
            limit = None
            if t.time_limit_factor and job.time_limit_min:
                limit = math.ceil(job.time_limit_min * t.time_limit_factor)  # 1 min x 1.5 is 2, not 1
                if t.max_time_limit_min:
                    limit = min(limit, t.max_time_limit_min)
                limit = max(limit, job.time_limit_min)
            steps.append(
                PlannedAction(
                    seq=0,
                    kind=ActionKind.REQUEUE,
                    target=job.job_id,
                    target_type="job",
                    job_changes=JobChanges(exclude_nodes=exclude, time_limit_min=limit, env=dict(t.env)),
                )
            )
        elif t.kind is ActionKind.NOTIFY_USER:
            if job is None or not job.user:
                if job is not None:
                    decision.notes.append("the job's user is unknown: only ops are told")
                continue
            steps.append(PlannedAction(seq=0, kind=ActionKind.NOTIFY_USER, target=job.user, target_type="people"))
        elif t.kind is ActionKind.NOTIFY_OPS:
            steps.append(PlannedAction(seq=0, kind=ActionKind.NOTIFY_OPS, target="ops", target_type="people"))
        # ActionKind.NONE adds nothing; an empty plan becomes a single `none` later.
    return _dedupe(steps)


def _dedupe(steps: list[PlannedAction]) -> list[PlannedAction]:
    """One action per (kind, target); a repeated diag keeps the first place and the deepest level."""
    seen: dict[tuple[ActionKind, str], PlannedAction] = {}
    out: list[PlannedAction] = []
    for s in steps:
        key = (s.kind, s.target)
        if key in seen:
            first = seen[key]
            if s.diag_level and (first.diag_level or 0) < s.diag_level:
                first.diag_level = s.diag_level
            first.diag_checks = list(dict.fromkeys([*first.diag_checks, *s.diag_checks]))
            first.after_diag_passes = first.after_diag_passes or s.after_diag_passes
            first.rung = first.rung if first.rung is not None else s.rung
            continue
        seen[key] = s
        out.append(s)
    return out


def _enforce_sticky_and_lemon(fault, steps: list[PlannedAction], acting: list[str], decision: Decision) -> list[PlannedAction]:
    sticky = fault is not None and fault.behaviour is FaultBehaviour.STICKY
    stays_out = {
        n for n in acting
        if n in decision.lemon or any(s.kind is ActionKind.RMA_TICKET and s.target == n for s in steps)
    }
    out: list[PlannedAction] = []
    for s in steps:
        if s.kind is ActionKind.RESUME and s.target in stays_out:
            decision.notes.append(f"{s.target} stays drained (hardware ticket or lemon): no resume")
            continue
        if s.kind is ActionKind.RESUME and (sticky or s.after_diag_passes):
            level = fault.diag_level if sticky else 1
            diag = next((d for d in out if d.kind is ActionKind.DIAG and d.target == s.target), None)
            if diag is None:
                out.append(PlannedAction(seq=0, kind=ActionKind.DIAG, target=s.target, target_type="node", diag_level=level))
            elif (diag.diag_level or 0) < level:
                diag.diag_level = level
            s.after_diag_passes = True
        out.append(s)
    for n in sorted(stays_out & set(decision.lemon)):
        if not any(s.kind is ActionKind.DRAIN and s.target == n for s in out):
            out.insert(0, PlannedAction(seq=0, kind=ActionKind.DRAIN, target=n, target_type="node"))
        if not any(s.kind is ActionKind.RMA_TICKET and s.target == n for s in out):
            out.append(PlannedAction(seq=0, kind=ActionKind.RMA_TICKET, target=n, target_type="node"))
    if sticky and acting:
        decision.notes.append(
            f"{decision.signature} is sticky: the node stays out until diagnostics level {fault.diag_level} pass"
        )
    reason = ownership_reason(decision.cause, decision.signature, decision.incident_id)
    for s in out:
        if s.kind is ActionKind.DRAIN and s.reason is None:
            s.reason = reason
    return out


def _partitions_of(n: str, nodes: dict[str, NodeInfo], job: JobRecord | None) -> list[str]:
    info = nodes.get(n)
    if info is not None and info.partitions:
        return list(info.partitions)
    if job is not None and job.partition and n in job.nodes:
        return [p.strip() for p in job.partition.split(",") if p.strip()]
    return []


def apply_guards(
    policy: Policy,
    history: History,
    mode: ModeState,
    now: datetime,
    job: JobRecord | None,
    nodes: dict[str, NodeInfo],
    steps: list[PlannedAction],
    decision: Decision,
    dry_run: bool,
    drained_earlier: frozenset[str] = frozenset(),
) -> None:
    """`drained_earlier`: nodes this incident's own plan drained before these steps (escalation)."""
    breakers = dict(history.open_breakers)  # grows as this decision trips breakers
    planned_drains: list[DrainRecord] = []
    drain_block: dict[str, tuple[Block, str]] = {}
    drained_here: set[str] = set(drained_earlier)
    hist = history.model_copy(update={"open_breakers": breakers})

    def block(s: PlannedAction, b: Block, why: str) -> None:
        s.blocked_by, s.blocked_why = b, why
        if b in APPROVABLE:
            s.needs_approval = True
        else:
            s.execute = False

    for s in steps:
        drained_reboot = (s.kind is ActionKind.REBOOT and policy.reboot_drained_without_approval
                          and s.target in drained_here)
        if s.kind in policy.approval_required and not drained_reboot:
            s.needs_approval = True
            s.approval_why = f"the policy asks a human before any {s.kind.value}"
        if s.target_type == "node":
            owner = drain_owner(nodes.get(s.target))
            parts = _partitions_of(s.target, nodes, job)
            if owner is Owner.FOREIGN and s.kind is not ActionKind.RMA_TICKET:
                block(s, Block.FOREIGN_OWNER, f"{s.target} was drained by someone else "
                      f"({decision.foreign_drains.get(s.target, '')!r}); Pitstop never touches it")
            elif s.target in drain_block and s.kind in NODE_CHANGING | {ActionKind.DIAG}:
                b, why = drain_block[s.target]
                block(s, b, f"waits for the drain of {s.target}: {why}")
            elif s.kind is ActionKind.DRAIN:
                if owner is Owner.PITSTOP:
                    decision.notes.append(f"{s.target} is already drained by Pitstop: reason updated")
                    drained_here.add(s.target)
                else:
                    check = check_drain(policy, hist, s.target, parts, now, planned_drains)
                    for trip in check.trips:
                        if trip.scope not in breakers:
                            breakers[trip.scope] = trip.reason
                            decision.breaker_trips.append(trip)
                    if check.block is not None:
                        block(s, check.block, check.why)
                        drain_block[s.target] = (check.block, check.why)
                    else:
                        planned_drains.append(DrainRecord(node=s.target, at=now, partitions=parts))
                        drained_here.add(s.target)
            elif s.kind is ActionKind.RESUME:
                if owner is Owner.NONE and s.target not in drained_here:
                    block(s, Block.NOT_OWNED, f"{s.target} is not drained: nothing to resume")
            elif s.kind in {ActionKind.REBOOT, ActionKind.GPU_RESET}:
                scopes = [partition_scope(p) for p in parts] + [CLUSTER_SCOPE]
                open_scope = next((sc for sc in scopes if sc in breakers), None)
                if open_scope is not None:
                    block(s, Block.BREAKER_OPEN, f"circuit breaker {open_scope} is open ({breakers[open_scope]})")
            allowed, why = mode.allows([s.target], parts)
        elif s.kind is ActionKind.REQUEUE and job is not None:
            limit = policy.max_same_failures
            rule = policy.rule_for(decision.cause, decision.signature, decision.job_ran_minutes)
            if rule is not None and rule.max_same_failures is not None:
                limit = rule.max_same_failures
            if history.job_same_failures >= limit:
                block(s, Block.RETRY_LIMIT, f"job {job.job_id} already failed this way "
                      f"{history.job_same_failures} time(s) (limit {limit}): not requeued again")
            parts = [p for p in (job.partition or "").split(",") if p]
            allowed, why = mode.allows(list(job.nodes), parts)
        else:
            allowed, why = True, ""  # notifications and `none` run in every mode
        if s.kind in NOTIFYING:
            continue
        if dry_run:
            allowed, why = False, "dry-run: nothing changed on the cluster"
        if not allowed and s.execute:
            s.execute, s.would_do_why = False, why
