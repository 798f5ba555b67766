"""Escalation inside one incident, and where each node ends up. Pure: outcomes in, steps out.

When a ladder rung's action fails (a GPU reset that says "GPU is lost") or its follow-up check
fails, the next rung runs in the SAME incident (reset -> reboot -> check -> RMA ticket), bounded
by the ladder; risky rungs ask first, through the same guards as the first plan. An incident
ends with every node it drained in exactly one state (`NodeEnd`): back in service after passing
its checks, out with an RMA ticket, waiting for a human's answer, or handed to a named owner.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from pitstop.cluster.base import JobRecord, NodeInfo
from pitstop.policy.decide import Decision, PlannedAction, apply_guards, make_node_step
from pitstop.policy.history import History
from pitstop.policy.model import ActionKind, ActionTemplate, FaultBehaviour, Policy
from pitstop.policy.safety import ModeState, ownership_reason

# Journal states in which a step's result is known (see pitstop.store.records.ActionState).
_SETTLED = frozenset({"done", "failed", "skipped", "denied"})
# A fix rung is followed by a check and, if the check passes, a resume.
_FIXES = frozenset({ActionKind.GPU_RESET, ActionKind.REBOOT})


class StepOutcome(BaseModel):
    """What became of one planned step (from the action journal)."""

    state: str = Field(description="intended | awaiting_approval | running | done | failed | skipped | denied | would_do")
    passed: bool | None = Field(default=None, description="diag: did the node pass")
    could_not_run: bool = Field(default=False, description="diag: the level asked for could not run (no DCGM)")
    ticket_id: int | None = None

    @classmethod
    def from_journal(cls, state: str, params: dict | None) -> "StepOutcome":
        """From an action-journal row (its state and params; results sit in result_details)."""
        details = (params or {}).get("result_details") or {}
        return cls(state=state, passed=details.get("passed"), ticket_id=details.get("ticket_id"),
                   could_not_run=bool(details.get("could_not_run")))


class EndState(StrEnum):
    IN_SERVICE = "in_service"  # resumed after passing its checks, or never taken out
    RMA = "rma"  # out, with a hardware ticket
    AWAITING_APPROVAL = "awaiting_approval"
    HANDED_OVER = "handed_over"  # out, owned by a named human (policy.handover_to)
    NOT_ACTED = "not_acted"  # observe mode, dry-run, a guard, or a denied drain: Pitstop changed nothing


class NodeEnd(BaseModel):
    node: str
    state: EndState
    detail: str = Field(description="one line for `pitstop nodes` and the notification")
    owner: str | None = None


def _node_steps(decision: Decision, node: str) -> list[PlannedAction]:
    return [a for a in decision.actions if a.target_type == "node" and a.target == node]


def _top_rung(steps: list[PlannedAction]) -> PlannedAction | None:
    rungs = [a for a in steps if a.rung is not None]
    return max(rungs, key=lambda a: (a.rung, a.seq)) if rungs else None


def _resumed(steps: list[PlannedAction], outcomes: dict[int, StepOutcome]) -> bool:
    return any(a.kind is ActionKind.RESUME and _state(a, outcomes) == "done" for a in steps)


def _state(a: PlannedAction, outcomes: dict[int, StepOutcome]) -> str | None:
    o = outcomes.get(a.seq)
    return o.state if o is not None else None


def _should_climb(top: PlannedAction, steps: list[PlannedAction], outcomes: dict[int, StepOutcome]) -> bool:
    """The rung in use failed, or the check after it did, and nothing waits or was refused."""
    after = [a for a in steps if a.seq >= top.seq]
    if top.kind is ActionKind.RMA_TICKET:
        return False  # a ticket is the end of the ladder's road
    if any(a.disposition in {"blocked", "would_do"} for a in after):
        return False  # a guard or the mode stopped this node: a human decides, not the ladder
    if any(_state(a, outcomes) not in _SETTLED for a in after):
        return False  # still waiting (approval) or never ran
    if any(_state(a, outcomes) == "denied" for a in after):
        return False  # a human said no: never climb past them
    if _resumed(after, outcomes):
        return False
    if any(a.kind is ActionKind.DIAG and outcomes[a.seq].could_not_run for a in after):
        return False  # nothing proved the node bad (e.g. no DCGM for level 3): a person decides
    rung_failed = _state(top, outcomes) == "failed"
    check_failed = any(
        a.kind is ActionKind.DIAG and (outcomes[a.seq].passed is False or _state(a, outcomes) == "failed")
        for a in after
    )
    return rung_failed or check_failed


def next_rung_steps(decision: Decision, policy: Policy, outcomes: dict[int, StepOutcome]) -> list[PlannedAction]:
    """The steps that climb one rung for every node whose current rung did not fix it.

    Idempotent: it looks only at the highest rung already planned, so asking again after those
    steps were added (or after a crash) adds nothing until they have run and failed too.
    """
    rule = policy.rule_for(decision.cause, decision.signature, decision.job_ran_minutes)
    if rule is None or rule.ladder is None or rule.ladder not in policy.ladders:
        return []
    rungs = policy.ladders[rule.ladder].rungs
    fault = policy.fault_for(decision.signature)
    level = fault.diag_level if fault is not None and fault.behaviour is FaultBehaviour.STICKY else 1
    reason = ownership_reason(decision.cause, decision.signature, decision.incident_id)
    new: list[PlannedAction] = []
    for node in decision.ladder:
        steps = _node_steps(decision, node)
        top = _top_rung(steps)
        if top is None or top.rung is None or top.rung + 1 >= len(rungs):
            continue
        if not _should_climb(top, steps, outcomes):
            continue
        template = rungs[top.rung + 1]
        step = make_node_step(template, node, reason, top.rung + 1)
        new.append(step)
        if step.kind in _FIXES:
            new.append(make_node_step(ActionTemplate(kind=ActionKind.DIAG, level=level), node, reason))
        if step.kind in _FIXES or step.kind is ActionKind.DIAG:
            new.append(make_node_step(ActionTemplate(kind=ActionKind.RESUME, after_diag_passes=True), node, reason))
    return new


def extend_decision(
    decision: Decision,
    steps: list[PlannedAction],
    *,
    policy: Policy,
    history: History,
    mode: ModeState,
    now: datetime,
    job: JobRecord | None = None,
    nodes: dict[str, NodeInfo] | None = None,
    dry_run: bool = False,
) -> list[PlannedAction]:
    """Append escalation steps to the plan, numbered after it, through the same guards (approval
    for risky kinds, breakers, mode, ownership). Returns the steps as appended."""
    if not steps:
        return []
    start = max((a.seq for a in decision.actions), default=-1) + 1
    for i, s in enumerate(steps):
        s.seq = start + i
    drained = frozenset(a.target for a in decision.actions if a.kind is ActionKind.DRAIN and a.disposition == "run")
    apply_guards(policy, history, mode, now, job, nodes or {}, steps, decision, dry_run, drained)
    for s in steps:
        if s.rung is not None:
            label = str(s.kind.value) + (f" level {s.diag_level}" if s.diag_level else "")
            decision.notes.append(f"escalated within the incident: {s.target} rung {s.rung + 1} ({label})")
    decision.actions.extend(steps)
    return steps


def node_end_states(decision: Decision, policy: Policy, outcomes: dict[int, StepOutcome]) -> list[NodeEnd]:
    """Where each node this incident planned to change ends up; one state per node."""
    ends: list[NodeEnd] = []
    for node in dict.fromkeys(a.target for a in decision.actions if a.target_type == "node"):
        steps = _node_steps(decision, node)
        ends.append(_end_of(node, steps, policy, outcomes))
    return ends


def _end_of(node: str, steps: list[PlannedAction], policy: Policy, outcomes: dict[int, StepOutcome]) -> NodeEnd:
    def state(a: PlannedAction) -> str | None:
        return _state(a, outcomes)

    pending = next((a for a in steps if state(a) in {"awaiting_approval", "intended", "running"}
                    and a.disposition != "would_do"), None)
    if pending is not None and state(pending) == "awaiting_approval":
        return NodeEnd(node=node, state=EndState.AWAITING_APPROVAL,
                       detail=f"next step: {pending.kind.value} (waiting for approval)")
    if pending is not None:  # a step that never finished (its run died): a person picks it up
        return NodeEnd(node=node, state=EndState.HANDED_OVER, owner=policy.handover_to,
                       detail=f"next step: {pending.kind.value} (not finished)")
    tickets = [a for a in steps if a.kind is ActionKind.RMA_TICKET and state(a) == "done"]
    if tickets:
        tid = outcomes[tickets[-1].seq].ticket_id
        return NodeEnd(node=node, state=EndState.RMA, detail=f"out of service: RMA ticket{f' #{tid}' if tid else ''} opened")
    if _resumed(steps, outcomes):
        return NodeEnd(node=node, state=EndState.IN_SERVICE, detail="back in service after passing its checks")
    drained = any(a.kind in {ActionKind.DRAIN, ActionKind.REBOOT, ActionKind.GPU_RESET} and state(a) == "done" for a in steps)
    if not drained:
        return NodeEnd(node=node, state=EndState.NOT_ACTED, detail="not changed by Pitstop")
    refused = next((a for a in steps if state(a) == "denied"), None)
    unrun = next((a for a in steps if a.kind is ActionKind.DIAG and a.seq in outcomes and outcomes[a.seq].could_not_run), None)
    why = (f"{refused.kind.value} was denied" if refused else
           f"diagnostics level {unrun.diag_level} could not run there (no DCGM)" if unrun else
           "the escalation ladder is exhausted" if _top_rung(steps) is not None else "no automatic step left")
    return NodeEnd(node=node, state=EndState.HANDED_OVER, owner=policy.handover_to,
                   detail=f"stays drained, handed to {policy.handover_to}: {why}")
