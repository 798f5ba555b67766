"""Carry out a Decision: journal, approve, act, in order. Called from a flow body.

Shared by post_failure and node_alarm. Per action (keyed by incident + seq):
  final in the journal -> skip (a re-run never repeats a finished action);
  left "running" by a crashed run -> confirm from the cluster's state when possible, else redo
  only kinds that are safe to redo (drain with the same reason, diag);
  blocked -> skipped; would_do -> recorded as would_do;
  needs approval -> ops are told, the flow pauses for the form; deny/timeout -> denied;
  run -> intent, execute (one task per kind), result.
Notifications (notify_ops/notify_user) are journaled here and sent by the notify step.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

from pitstop.policy.decide import Decision, PlannedAction
from pitstop.policy.model import ActionKind, NOTIFYING
from tasks import journal
from tasks.act import ACT_TASKS, already_applied, intent_params
from tasks.approval import wait_for_approval
from tasks.context import PipelineContext
from tasks.message import ActionLine

SAFE_TO_REDO = frozenset({ActionKind.DRAIN, ActionKind.DIAG, ActionKind.NONE})


class RemediationOutcome(BaseModel):
    lines: list[ActionLine] = Field(default_factory=list)
    facts: dict = Field(default_factory=dict, description="diag results etc., shared between steps")
    approvals_asked: int = 0


def carry_out(
    ctx: PipelineContext,
    incident_id: int,
    decision: Decision,
    ask_approval: Callable[[PlannedAction], None],
    rma: Callable[[PlannedAction, dict], "journal.TicketResult"],
) -> RemediationOutcome:
    outcome = RemediationOutcome(facts={"incident_id": incident_id})
    for action in decision.actions:
        outcome.lines.append(_one(ctx, incident_id, action, outcome, ask_approval, rma))
    return outcome


def _one(ctx, incident_id, action: PlannedAction, outcome, ask_approval, rma) -> ActionLine:
    seq = action.seq
    row = journal.action_entry(ctx, incident_id, seq)
    line = ActionLine(kind=action.kind.value, target=action.target, state="")
    if row is not None and row.state in FINAL_OR_NOTIFIED:
        line.state, line.detail = row.state, f"(from an earlier run) {row.result or ''}".strip()
        if action.kind is ActionKind.DIAG and row.details:
            outcome.facts.setdefault("diag", {})[action.target] = row.details
        return line
    if row is not None and row.state == "running":
        confirmed = already_applied(ctx, action, row.params or {})
        if confirmed or (confirmed is None and action.kind not in SAFE_TO_REDO):
            result = "confirmed from cluster state after an interrupted run" if confirmed else (
                "interrupted mid-action by an earlier run; not repeated (check by hand)"
            )
            state = "done" if confirmed else "failed"
            journal.record_result(ctx, incident_id, seq, state, result)
            line.state, line.detail = state, result
            return line

    disposition = action.disposition
    if action.kind in NOTIFYING:
        journal.record_intent(ctx, incident_id, action, "intended", intent_params(ctx, action))
        line.state, line.detail = "intended", "sent with the incident notification"
        return line
    if disposition == "blocked":
        journal.record_intent(ctx, incident_id, action, "skipped", intent_params(ctx, action))
        journal.record_result(ctx, incident_id, seq, "skipped", action.blocked_why)
        line.state, line.detail = "skipped", action.blocked_why
        return line
    if disposition == "would_do":
        journal.record_intent(ctx, incident_id, action, "would_do", intent_params(ctx, action))
        journal.record_result(ctx, incident_id, seq, "would_do", action.would_do_why)
        line.state, line.detail = "would_do", action.would_do_why
        return line
    if disposition == "ask":
        journal.record_intent(ctx, incident_id, action, "awaiting_approval", intent_params(ctx, action))
        ask_approval(action)
        outcome.approvals_asked += 1
        answer = wait_for_approval(f"incident-{incident_id}-action-{seq}", ctx.settings.pipeline.approval_timeout_s)
        if not answer.approved:
            journal.record_result(ctx, incident_id, seq, "denied", answer.summary)
            line.state, line.detail = "denied", answer.summary
            return line
        line.detail = f"approved: {answer.comment}" if answer.comment else "approved"

    journal.record_intent(ctx, incident_id, action, "running", intent_params(ctx, action))
    if action.kind is ActionKind.RMA_TICKET:
        ticket = rma(action, outcome.facts)
        state, summary, details = ("done" if ticket.ok else "failed"), ticket.summary, {"ticket_id": ticket.ticket_id}
    else:
        result = ACT_TASKS[action.kind](ctx, action, outcome.facts)
        state, summary, details = ("done" if result.ok else "failed"), result.summary, result.details
    journal.record_result(ctx, incident_id, seq, state, summary, details)
    line.state = state
    line.detail = f"{line.detail}; {summary}" if line.detail else summary
    return line


FINAL_OR_NOTIFIED = journal.FINAL_STATES
