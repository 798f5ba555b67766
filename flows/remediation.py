"""The one remediation routine both incident flows share: verdict -> decision -> actions (with
escalation inside the incident) -> notification -> records.

`post_failure` and `node_alarm` differ only in how they open the incident and gather evidence;
from the verdict on, they run this.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from pitstop.cluster.base import JobRecord
from pitstop.models import Verdict
from tasks import journal
from tasks.approval import ApprovalOutcome, ApprovalRequest, run_end
from tasks.decide import decide_remediation, end_states, escalate_remediation
from tasks.message import ActionLine, IncidentSummary
from tasks.notify import notify_incident
from tasks.remediate import carry_out
from tasks.tickets import open_rma_ticket


class FlowReport(BaseModel):
    """What a remediation flow run returns (also what `pitstop demo` prints)."""

    incident_id: int | None = None
    subject: str
    status: str = Field(description="done | duplicate | busy | failed")
    verdict: Verdict | None = None
    actions: list[ActionLine] = Field(default_factory=list)
    explain: list[str] = Field(default_factory=list)
    notified: list[str] = Field(default_factory=list)
    flow_run_url: str | None = None
    approvals: list[ApprovalOutcome] = Field(default_factory=list, description="every answer, in order")


def end_of_run(report: FlowReport):
    """What the flow returns: the report, in a state named for its approvals' answer
    (Completed "Denied" / "Timed out" / "Approved", or Cancelled after a Cancel)."""
    return run_end(report.approvals, report)


class IncidentSubject(BaseModel):
    """What the incident is about, as both flows know it."""

    kind: str = Field(description="job | node")
    name: str = Field(description="job id or node name")
    job: JobRecord | None = None
    node: str | None = None
    nodes: list[str] = Field(default_factory=list)
    user: str | None = None
    faulty_nodes: list[str] | None = Field(default=None, description="nodes with hardware evidence: acted on")
    suspect_nodes: list[str] = Field(default_factory=list, description="named by the logs only: excluded")
    tell_user: bool = True

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name}"


def remediate(ctx, incident_id: int, subject: IncidentSubject, verdict: Verdict, *,
              problems: list[str], ticket_evidence: dict, extra_notes: list[str] | None = None) -> FlowReport:
    from pitstop.policy.decide import Decision

    journal.save_verdict(ctx, incident_id, verdict)
    saved = journal.incident_decision(ctx, incident_id)
    if saved is not None:
        decision = Decision.model_validate(saved)  # a re-run keeps the first run's plan
    else:
        decision = decide_remediation(ctx, incident_id, verdict, job=subject.job, node=subject.node,
                                      faulty_nodes=subject.faulty_nodes, suspect_nodes=subject.suspect_nodes)
        decision.notes.extend(extra_notes or [])
        journal.save_decision(ctx, incident_id, decision)

    storm = decision.switch_storm
    joined = storm.fabric_incident_id if storm is not None and not storm.opened_here else None

    def summary(lines, question: ApprovalRequest | None = None, ends: list[str] | None = None) -> IncidentSummary:
        asked = {} if question is None else {
            "awaiting_approval": question.title(), "approval_deadline": question.deadline,
            "approval_url": question.flow_run_url, "approval_markdown": question.markdown(),
            "approval_why": sorted({w for step in question.steps for w in step.why}) or question.why,
        }
        return IncidentSummary(
            incident_id=incident_id, subject_kind=subject.kind, subject=subject.name, cluster=ctx.cluster_name,
            mode=decision.mode, dry_run=decision.dry_run, verdict=verdict, user=subject.user,
            nodes=subject.nodes, actions=lines, explain=decision.explain() + (ends or []), problems=problems,
            flow_run_url=ctx.flow_run_url, switch_storm=storm.switch if storm and storm.opened_here else None,
            **asked,
        )

    outcome = carry_out(
        ctx, incident_id, decision,
        lambda question, lines: notify_incident(ctx, summary(lines, question=question), to_user=False),
        lambda action, facts: open_rma_ticket(ctx, incident_id, action, verdict, ticket_evidence, facts),
        escalate=lambda d: escalate_remediation(ctx, incident_id, d, subject.job),
        evidence=verdict.evidence,
    )
    ends = [f"{e.node}: {e.detail}" for e in end_states(ctx, incident_id, decision)]
    ends += [f"approval: {a.summary}" for a in outcome.answers]
    deliveries = notify_incident(ctx, summary(outcome.lines, ends=ends), to_user=subject.tell_user, ops_told_by=joined)
    journal.finish_notifications(ctx, incident_id, deliveries)
    journal.settle_notify_lines(outcome.lines, deliveries)
    journal.set_status(ctx, incident_id, "done")
    return FlowReport(
        incident_id=incident_id, subject=subject.label, status="done", verdict=verdict,
        actions=outcome.lines, explain=decision.explain() + ends,
        notified=[f"{d.audience}: {d.status}" for d in deliveries], flow_run_url=ctx.flow_run_url,
        approvals=outcome.answers,
    )


def on_cancelled(flow, flow_run, state) -> None:
    """Prefect's on_cancellation hook (also run by `pitstop up`'s runner after it killed the
    process): a Cancel is a denial; the steps this run had not finished are journaled as denied
    or skipped, so no later re-run picks them up."""
    from tasks.context import build_context
    from tasks.remediate import CANCELLED_STEP

    ctx = build_context()
    try:
        for incident_id in journal.open_incidents_of_run(ctx, str(flow_run.id)):
            for entry in journal.entries(ctx, incident_id):
                if entry.state == "awaiting_approval":
                    journal.resolve_approval(ctx, incident_id, entry.seq, False,
                                             "cancelled in the Prefect UI (Cancel = deny and stop)")
                elif entry.state in {"intended", "running"} and entry.kind not in journal.NOTIFY_AUDIENCE:
                    journal.finish(ctx, incident_id, entry.seq, "skipped", CANCELLED_STEP)
            journal.set_status(ctx, incident_id, "done")
    finally:
        ctx.close()
