"""Carry out a Decision: journal, approve, act, in order. Called from a flow body.

Shared by post_failure and node_alarm. Intent for every action is journaled first
(`journal.plan`); then per action (keyed by incident + seq):
  finished in the journal -> skipped (a re-run never repeats a finished action);
  left "running" by a killed run -> confirmed from the cluster's state when possible, else redone
  only for kinds that are safe to redo (drain with the same reason, diag), else failed for a human;
  blocked / would_do -> already final at planning;
  needs approval -> ops are told, the flow pauses for the form; deny/timeout -> denied;
  run -> claim (running), execute (one task per kind), result.
Notifications (notify_ops/notify_user) are journaled here and finished by the notify step.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

from pitstop.policy.decide import Decision, PlannedAction
from pitstop.policy.model import NODE_CHANGING, NODE_TARGETED, NOTIFYING, ActionKind
from tasks import journal
from tasks.act import ACT_TASKS, already_applied, intent_params
from tasks.approval import announcing, build_request, wait_for_approval
from tasks.context import PipelineContext
from tasks.message import ActionLine

SAFE_TO_REDO = frozenset({ActionKind.DRAIN, ActionKind.DIAG, ActionKind.NONE})
EXECUTED_STATES = frozenset({"done", "failed", "denied"})  # only execution/answers lead here
# Steps that only make sense if the ladder rung before them worked (the check and resume after a
# GPU reset or a reboot); after a failed rung they are skipped and the escalation climbs.
AFTER_A_RUNG = frozenset({ActionKind.DIAG, ActionKind.RESUME})
MAX_ROUNDS = 8  # plan + escalations; every default ladder has at most four rungs


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
    escalate: Callable[[Decision], list[PlannedAction]] | None = None,
    evidence: list | None = None,  # the verdict's Evidence for approval forms; None: the incident's record
) -> RemediationOutcome:
    """Run the plan; then, while `escalate` finds a node whose rung did not fix it, journal the
    next rung's steps (the decision is saved first, so a re-run after a crash keeps them) and
    run those too. The ladder bounds the loop; MAX_ROUNDS guards against a policy bug."""
    outcome = RemediationOutcome(facts={"incident_id": incident_id})
    asking = lambda action, key: build_request(ctx, incident_id, decision, action, key, evidence)  # noqa: E731
    journal.plan(ctx, incident_id, decision.actions)
    pending = list(decision.actions)
    for _ in range(MAX_ROUNDS):
        for action in pending:
            outcome.lines.append(_one(ctx, incident_id, action, outcome, ask_approval, rma, asking))
        pending = escalate(decision) if escalate is not None else []
        if not pending:
            break
        journal.save_decision(ctx, incident_id, decision)
        journal.plan(ctx, incident_id, pending)
    return outcome


def _finished_line(action: PlannedAction, row: journal.JournalEntry, outcome: RemediationOutcome) -> ActionLine:
    if action.kind is ActionKind.DIAG and row.details:
        outcome.facts.setdefault("diag", {})[action.target] = row.details
    _note_rung(action, row.state, outcome)
    if action.kind is ActionKind.DRAIN and row.state == "denied":  # a re-run must not ask again
        outcome.facts.setdefault("denied_drains", []).append(action.target)
    why = row.result or action.would_do_why or action.blocked_why
    if row.state in EXECUTED_STATES and row.result:
        why = f"(from an earlier run) {row.result}"
    return ActionLine(kind=action.kind.value, target=action.target, state=row.state, detail=why or "")


def _one(ctx, incident_id, action: PlannedAction, outcome, ask_approval, rma, asking=None) -> ActionLine:
    seq = action.seq
    row = journal.action_entry(ctx, incident_id, seq)
    line = ActionLine(kind=action.kind.value, target=action.target, state="")
    if row is None:  # planned a moment ago; only a wiped database gets here
        raise RuntimeError(f"incident {incident_id}: action {seq} is missing from the journal")
    if row.state in journal.FINAL_STATES:
        return _finished_line(action, row, outcome)
    if row.state == "running":
        if action.kind is ActionKind.RMA_TICKET:  # the ticket table is the cluster state here
            confirmed = journal.ticket_delivered(ctx, incident_id, action.target)
        else:
            confirmed = already_applied(ctx, action, row.params)
        if confirmed:
            result = "confirmed from the cluster's state after an interrupted run"
            journal.finish(ctx, incident_id, seq, "done", result)
            _after(ctx, incident_id, action)
            line.state, line.detail = "done", result
            return line
        if confirmed is None and action.kind not in SAFE_TO_REDO:
            result = "interrupted mid-action by an earlier run; not repeated (check it by hand)"
            journal.finish(ctx, incident_id, seq, "failed", result)
            line.state, line.detail = "failed", result
            return line
        outcome.facts["in_doubt"] = {seq: row.params}  # e.g. a requeue done but not its update

    if action.kind is ActionKind.NONE:
        journal.start(ctx, incident_id, seq, {})
        journal.finish(ctx, incident_id, seq, "done", "nothing to do")
        line.state, line.detail = "done", "nothing to do"
        return line
    if action.kind in NOTIFYING:
        line.state, line.detail = "intended", "sent with the incident notification"
        return line
    failed_rung = outcome.facts.setdefault("failed_rung", {}).get(action.target)
    if failed_rung and action.rung is None and action.kind in AFTER_A_RUNG:
        # The fix did not happen: checking and resuming now would return a node nobody fixed.
        result = f"not done: the {failed_rung} of {action.target} failed; the ladder climbs instead"
        journal.finish(ctx, incident_id, seq, "skipped", result)
        line.state, line.detail = "skipped", result
        return line
    denied_drains = outcome.facts.setdefault("denied_drains", [])
    if action.target in denied_drains and action.kind in NODE_TARGETED:
        # The human said no to taking this node out: do not ask again for each step after it.
        result = f"not done: the drain of {action.target} was denied"
        journal.finish(ctx, incident_id, seq, "skipped", result)
        line.state, line.detail = "skipped", result
        return line
    if action.disposition == "ask" and row.state == "awaiting_approval":
        key = f"incident-{incident_id}-action-{seq}"
        request = asking(action, key) if asking is not None else None  # what the form shows; its deadline
        with announcing(request):  # the notification states the same deadline and links the paused run
            ask_approval(action)
        outcome.approvals_asked += 1
        journal.set_status(ctx, incident_id, "awaiting_approval")  # what `pitstop incidents` shows meanwhile
        answer = wait_for_approval(key, ctx.settings.pipeline.approval_timeout_s, request)
        journal.set_status(ctx, incident_id, "acting")
        journal.resolve_approval(ctx, incident_id, seq, answer.approved, answer.note)
        if not answer.approved:
            if action.kind is ActionKind.DRAIN:
                denied_drains.append(action.target)
            line.state, line.detail = "denied", answer.summary
            return line
        line.detail = answer.summary

    if not journal.start(ctx, incident_id, seq, intent_params(ctx, action)):
        row = journal.action_entry(ctx, incident_id, seq)  # finished meanwhile by another run
        return _finished_line(action, row, outcome)
    if action.kind is ActionKind.RMA_TICKET:
        ticket = rma(action, outcome.facts)
        state, summary, details = ("done" if ticket.ok else "failed"), ticket.summary, {"ticket_id": ticket.ticket_id}
    else:
        result = ACT_TASKS[action.kind](ctx, action, outcome.facts)
        state, summary, details = result.state, result.summary, result.details
    journal.finish(ctx, incident_id, seq, state, summary, details)
    _after(ctx, incident_id, action)
    _note_rung(action, state, outcome)
    line.state = state
    line.detail = f"{line.detail}; {summary}" if line.detail else summary
    return line


def _note_rung(action: PlannedAction, state: str, outcome: RemediationOutcome) -> None:
    """Remember, per node, whether the ladder rung last run there failed (see AFTER_A_RUNG)."""
    if action.rung is None or action.target_type != "node":
        return
    failed = outcome.facts.setdefault("failed_rung", {})
    if state == "failed":
        failed[action.target] = action.kind.value
    else:
        failed.pop(action.target, None)


def _after(ctx: PipelineContext, incident_id: int, action: PlannedAction) -> None:
    if action.kind in NODE_CHANGING:
        journal.record_node(ctx, action.target, incident_id)
