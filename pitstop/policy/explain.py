"""A Decision as policy authors read it: cause, suspects, and each planned action with its why.

Pure. `pitstop policy explain` prints it; the JSON form is the contract tests and tools use:
`{cause, signature, confidence, rule, mode, suspects, actions: [{kind, target, why, ...}], notes}`.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from pitstop.policy.decide import Decision, PlannedAction
from pitstop.policy.model import ActionKind


class SuspectView(BaseModel):
    node: str
    hardware: bool = Field(description="the node's own evidence implicates it (it is acted on)")
    reasons: list[str] = Field(default_factory=list)


class ActionView(BaseModel):
    seq: int
    kind: str
    target: str
    disposition: str = Field(description="run | ask | would_do | blocked")
    why: str = Field(description="the rule, rung or guard behind this step")
    describe: str = Field(description="the line the notification shows")


class PlanView(BaseModel):
    cause: str
    signature: str
    confidence: float
    rule: str
    rule_description: str = ""
    bucket: str | None = Field(default=None, description="NVIDIA's Xid resolution bucket, when one applied")
    mode: str
    suspects: list[SuspectView] = Field(default_factory=list)
    actions: list[ActionView] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    explain: list[str] = Field(default_factory=list, description="the decision's own lines")


def action_why(decision: Decision, a: PlannedAction) -> str:
    parts = [f"rule {decision.rule}" + (f": {decision.rule_description}" if decision.rule_description else "")]
    if a.rung is not None and a.target in decision.ladder:
        pos = decision.ladder[a.target]
        parts.append(f"ladder {pos.ladder} rung {a.rung + 1}/{pos.rungs}")
    if a.kind is ActionKind.REQUEUE and a.job_changes is not None and a.job_changes.exclude_nodes:
        named = [n for n in a.job_changes.exclude_nodes if n in decision.faulty_nodes + decision.suspect_nodes]
        if named:
            parts.append("excludes " + ", ".join(named) + " (named by the evidence)")
    if a.kind is ActionKind.RESUME and a.after_diag_passes:
        parts.append("only if the diagnostics before it pass")
    if a.needs_approval:
        parts.append("asks a human: " + (a.blocked_why if a.blocked_by is not None else a.approval_why))
    elif a.blocked_why:
        parts.append(a.blocked_why)
    if a.would_do_why:
        parts.append(a.would_do_why)
    return "; ".join(parts)


def plan_view(decision: Decision, suspects: list[SuspectView] | None = None) -> PlanView:
    bucket = decision.rule.rsplit("(NVIDIA ", 1)[1].rstrip(")") if "(NVIDIA " in decision.rule else None
    return PlanView(
        cause=decision.cause.value, signature=decision.signature, confidence=decision.confidence,
        rule=decision.rule, rule_description=decision.rule_description, bucket=bucket, mode=decision.mode,
        suspects=suspects or [],
        actions=[ActionView(seq=a.seq, kind=a.kind.value, target=a.target, disposition=a.disposition,
                            why=action_why(decision, a), describe=a.describe()) for a in decision.actions],
        notes=list(decision.notes), explain=decision.explain(),
    )
