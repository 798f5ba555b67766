"""Carry out a Decision: journal, approve, act, in order. Called from a flow body.

Shared by post_failure and node_alarm. Intent for every action is journaled first
(`journal.plan`); then per action (keyed by incident + seq):
  finished in the journal -> skipped (a re-run never repeats a finished action);
  left "running" by a killed run -> confirmed from the cluster's state when possible, else redone
  only for kinds that are safe to redo (drain with the same reason, diag), else failed for a human;
  blocked / would_do -> already final at planning;
  needs approval -> one question per plan round: at the first step that needs consent, ops are
    asked once about every step of the round that needs it (read-only steps never), the flow
    pauses for the form, and the answer covers all of them; deny/timeout -> denied; Cancel ->
    denied and every remaining step skipped (no escalation);
  run -> claim (running), execute (one task per kind), result (after the approver's words).
Notifications (notify_ops/notify_user) are journaled here and finished by the notify step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone

from pydantic import BaseModel, Field

from pitstop.policy.decide import Decision, PlannedAction
from pitstop.policy.model import NODE_CHANGING, NODE_TARGETED, NOTIFYING, ActionKind
from tasks import journal
from tasks.act import ACT_TASKS, already_applied, intent_params
from tasks.approval import (ApprovalOutcome, ApprovalRequest, answer_given_to, build_request, question_key, run_logger,
                            wait_for_approval)
from tasks.context import PipelineContext
from tasks.message import ActionLine

SAFE_TO_REDO = frozenset({ActionKind.DRAIN, ActionKind.DIAG, ActionKind.NONE})
EXECUTED_STATES = frozenset({"done", "failed", "denied"})  # only execution/answers lead here
# Steps that only make sense if the ladder rung before them worked (the check and resume after a
# GPU reset or a reboot); after a failed rung they are skipped and the escalation climbs.
AFTER_A_RUNG = frozenset({ActionKind.DIAG, ActionKind.RESUME})
MAX_ROUNDS = 8  # plan + escalations; every default ladder has at most four rungs
# Steps that change nothing: never put in an approval question (a diag that waited for a drain
# follows that drain's answer through `denied_drains`).
READ_ONLY = frozenset({ActionKind.DIAG}) | NOTIFYING
# An approval question that could not be delivered is sent again after these pauses (seconds).
DELIVERY_RETRIES_S = (2.0, 5.0)
CANCELLED_STEP = "not done: the approval was cancelled (Cancel = deny and stop)"


class RemediationOutcome(BaseModel):
    lines: list[ActionLine] = Field(default_factory=list)
    facts: dict = Field(default_factory=dict, description="diag results etc., shared between steps")
    approvals_asked: int = 0
    answers: list[ApprovalOutcome] = Field(default_factory=list, description="every answer, in order")
    stopped: bool = Field(default=False, description="Cancel: nothing more runs")


# ask(request, lines so far) -> the deliveries of the "approval needed" notification
Ask = Callable[[ApprovalRequest, list[ActionLine]], list]


def carry_out(
    ctx: PipelineContext,
    incident_id: int,
    decision: Decision,
    ask_approval: Ask,
    rma: Callable[[PlannedAction, dict], "journal.TicketResult"],
    escalate: Callable[[Decision], list[PlannedAction]] | None = None,
    evidence: list | None = None,  # the verdict's Evidence for approval forms; None: the incident's record
    sleep: Callable[[float], None] = time.sleep,
) -> RemediationOutcome:
    """Run the plan; then, while `escalate` finds a node whose rung did not fix it, journal the
    next rung's steps (the decision is saved first, so a re-run after a crash keeps them) and
    run those too, asking again only for the new steps. The ladder bounds the loop; MAX_ROUNDS
    guards against a policy bug. A Cancel ends it at once."""
    outcome = RemediationOutcome(facts={"incident_id": incident_id})
    journal.plan(ctx, incident_id, decision.actions)
    pending = list(decision.actions)
    for _ in range(MAX_ROUNDS):
        answers: dict[int, ApprovalOutcome] = {}
        for n, action in enumerate(pending):
            if outcome.stopped:
                outcome.lines.append(_stopped_line(ctx, incident_id, action))
                continue
            if action.seq not in answers and _needs_consent(ctx, incident_id, action, outcome):
                listed = [a for a in pending[n:] if _needs_consent(ctx, incident_id, a, outcome)]
                answer = _ask(ctx, incident_id, decision, listed, outcome, ask_approval, evidence, sleep)
                answers.update({a.seq: answer for a in listed})
                if answer.stops_the_run:
                    outcome.lines.append(_finished_line(action, journal.action_entry(ctx, incident_id, action.seq), outcome))
                    continue
            outcome.lines.append(_one(ctx, incident_id, action, outcome, rma))
        if outcome.stopped:
            break
        pending = escalate(decision) if escalate is not None else []
        if not pending:
            break
        journal.save_decision(ctx, incident_id, decision)
        journal.plan(ctx, incident_id, pending)
    return outcome


def _needs_consent(ctx, incident_id: int, action: PlannedAction, outcome: RemediationOutcome) -> bool:
    """A step the question must name: it asks, is not read-only, is still unanswered in the
    journal (a re-run after an answer does not ask again), and no denial already covers it."""
    if action.disposition != "ask" or action.kind in READ_ONLY:
        return False
    if action.target in outcome.facts.get("denied_drains", []) and action.kind in NODE_TARGETED:
        return False
    row = journal.action_entry(ctx, incident_id, action.seq)
    return row is not None and row.state == "awaiting_approval"


def _ask(ctx, incident_id: int, decision: Decision, listed: list[PlannedAction], outcome: RemediationOutcome,
         ask_approval: Ask, evidence, sleep) -> ApprovalOutcome:
    """One question for the `listed` steps; the answer is journaled on each of them."""
    log = run_logger()
    seqs = [a.seq for a in listed]
    earlier = journal.question_of(ctx, incident_id, seqs[0])
    deadline = _parse_time(earlier.get("deadline"))  # a re-run keeps the deadline the mail announced
    done = [f"{line.kind} {line.target}: {line.state}" for line in outcome.lines if line.state in EXECUTED_STATES]
    request = build_request(ctx, incident_id, decision, listed, question_key(incident_id, seqs), evidence,
                            deadline=deadline, done_so_far=done)
    facts = {"key": request.key, "steps": seqs, "title": request.title(), "deadline": request.deadline.isoformat(),
             "asked_at": datetime.now(timezone.utc).isoformat(), "flow_run_id": request.flow_run_id,
             "flow_run_url": request.flow_run_url}
    earlier_run = earlier.get("flow_run_id")
    answer = None
    if earlier_run and earlier_run != request.flow_run_id:  # asked by a run that stopped (restart)
        answer = answer_given_to(earlier_run, request.key)
        if answer is not None:
            log.info("Incident %s: using the answer given to the earlier run %s: %s", incident_id, earlier_run,
                     answer.summary)
    if answer is None:
        for seq in seqs:
            journal.note_question(ctx, incident_id, seq, facts)
        journal.set_status(ctx, incident_id, "awaiting_approval")  # what `pitstop incidents` shows meanwhile
        delivered, how = _deliver(request, outcome, ask_approval, log, sleep)
        for seq in seqs:
            journal.note_question(ctx, incident_id, seq, {"delivered": delivered, "delivery": how})
        outcome.approvals_asked += 1
        answer = wait_for_approval(request.key, ctx.settings.pipeline.approval_timeout_s, request)
    journal.set_status(ctx, incident_id, "acting")
    drains = {a.target for a in listed if a.kind is ActionKind.DRAIN}
    for action in listed:
        if not answer.approved and action.target in drains and action.kind is not ActionKind.DRAIN \
                and not action.approval_why:
            continue  # it asked only because it waits for that drain: skipped after it, as "not done"
        journal.resolve_approval(ctx, incident_id, action.seq, answer.approved, answer.note, by=answer.by)
        journal.note_question(ctx, incident_id, action.seq, {
            "answer": answer.answer, "by": answer.by, "comment": answer.comment,
            "answered_at": datetime.now(timezone.utc).isoformat()})
        if not answer.approved and action.kind is ActionKind.DRAIN:
            outcome.facts.setdefault("denied_drains", []).append(action.target)
    outcome.answers.append(answer)
    outcome.stopped = answer.stops_the_run
    return answer


def _deliver(request: ApprovalRequest, outcome: RemediationOutcome, ask_approval: Ask, log, sleep) -> tuple[bool, str]:
    """Send the question; retry a failed delivery. (delivered, what happened) for the journal."""
    how = "not sent"
    for attempt, pause in enumerate((*DELIVERY_RETRIES_S, None), 1):
        try:
            deliveries = [d for d in ask_approval(request, list(outcome.lines)) if d.audience == "ops"]
        except Exception as exc:  # the notify step itself failed (timeout, crash): try again
            deliveries, how = [], f"notify step failed ({type(exc).__name__}: {exc})"
        if deliveries:
            how = "; ".join(f"{d.status}: {d.summary}" for d in deliveries)
            if any(journal.delivered(d) for d in deliveries):
                if all(str(d.status).endswith("skipped") for d in deliveries):
                    log.warning("Approval question for incident %s: no notify URLs configured, so nobody was "
                                "mailed; it waits in the Prefect UI and `pitstop approvals`", request.incident_id)
                return True, how
        if pause is None:
            break
        log.warning("Approval question for incident %s could not be delivered (try %d: %s); retrying in %g s",
                    request.incident_id, attempt, how, pause)
        sleep(pause)
    log.error("Approval question for incident %s was NOT delivered after %d tries (%s); it waits in the Prefect "
              "UI and `pitstop approvals` until %s", request.incident_id, len(DELIVERY_RETRIES_S) + 1, how,
              request.deadline_text())
    return False, how


def _stopped_line(ctx, incident_id: int, action: PlannedAction) -> ActionLine:
    """After a Cancel: steps that would change something are skipped; notifications still go."""
    row = journal.action_entry(ctx, incident_id, action.seq)
    line = ActionLine(kind=action.kind.value, target=action.target, state=row.state if row else "",
                      detail=(row.result or "") if row else "")
    if row is None or row.state in journal.FINAL_STATES:
        return line
    if action.kind in NOTIFYING:
        line.state, line.detail = "intended", "sent with the incident notification"
        return line
    journal.finish(ctx, incident_id, action.seq, "skipped", CANCELLED_STEP)
    line.state, line.detail = "skipped", CANCELLED_STEP
    return line


def _parse_time(value) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) and value else None
    except ValueError:
        return None


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


def _one(ctx, incident_id, action: PlannedAction, outcome, rma) -> ActionLine:
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
    if row.state == "awaiting_approval":
        # Only a read-only step gets here unasked (see _needs_consent): it needs no consent.
        if action.kind not in READ_ONLY:
            raise RuntimeError(f"incident {incident_id}: step {seq} ({action.kind.value}) was never asked about")
        journal.resolve_approval(ctx, incident_id, seq, True, f"{action.kind.value} is read-only: no consent needed")
        row = journal.action_entry(ctx, incident_id, seq)
    if row.result and row.result.startswith("approved"):
        line.detail = row.result  # who said yes and why; kept in front of the step's own result

    if not journal.start(ctx, incident_id, seq, intent_params(ctx, action)):
        row = journal.action_entry(ctx, incident_id, seq)  # finished meanwhile by another run
        return _finished_line(action, row, outcome)
    if action.kind is ActionKind.RMA_TICKET:
        ticket = rma(action, outcome.facts)
        state, summary, details = ("done" if ticket.ok else "failed"), ticket.summary, {"ticket_id": ticket.ticket_id}
    else:
        result = ACT_TASKS[action.kind](ctx, action, outcome.facts)
        state, summary, details = result.state, result.summary, result.details
    line.state = state
    line.detail = f"{line.detail}; {summary}" if line.detail else summary
    journal.finish(ctx, incident_id, seq, state, line.detail, details)  # the approver's words stay
    _after(ctx, incident_id, action)
    _note_rung(action, state, outcome)
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
