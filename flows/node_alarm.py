"""node_alarm: a node raised an alarm -> drain, diagnose, then resume / reboot / RMA (per policy).

The policy (pitstop.policy) turns the alarm into an ordered plan (drain, escalation rung such as
reset or reboot, DCGM diag at the policy's level plus the node check with InfiniBand, resume
only if the diagnostics passed, RMA ticket after approval). A human-set (foreign) drain is
information only. Keyed by (cluster, node, alarm key): a repeated alarm does not double-act.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from flows.post_failure import FlowReport
from pitstop.cluster.base import validate_node_name
from pitstop.models import Cause, Evidence, Verdict
from tasks import journal
from tasks.context import build_context
from tasks.decide import decide_remediation
from tasks.evidence import NodeEvidence, gather_node_evidence
from tasks.message import IncidentSummary
from tasks.notify import notify_incident
from tasks.remediate import carry_out
from tasks.tickets import open_rma_ticket

# alarm name -> (cause, signature) when the alarm does not carry a signature itself
ALARM_CAUSES: dict[str, tuple[Cause, str]] = {
    "prolog_failed": (Cause.NODE_FAILURE, "prolog-failed"),
    "health_check_failed": (Cause.NODE_FAILURE, "health-check-failed"),
    "node_down": (Cause.NODE_FAILURE, "node-down"),
}
MAX_ALARM_LINES = 20


def alarm_verdict(alarm: str, details: dict, node_evidence: NodeEvidence | None = None) -> Verdict:
    """What the alarm says, plus the node's own Xid lines and failing checks as evidence."""
    if details.get("cause") and details.get("signature"):
        cause, signature = Cause(details["cause"]), str(details["signature"])
    elif alarm.startswith("xid-"):
        cause, signature = Cause.GPU_HARDWARE, alarm
    else:
        cause, signature = ALARM_CAUSES.get(alarm, (Cause.NODE_FAILURE, alarm or "alarm"))
    lines = [Evidence(line=0, text=str(x)[:500], source="alarm") for x in details.get("lines", [])]
    if node_evidence is not None:
        if node_evidence.kernel_log and node_evidence.kernel_lines:
            with open(node_evidence.kernel_log, encoding="utf-8", errors="replace") as handle:
                xids = [ln for ln in handle.read().splitlines() if "NVRM: Xid" in ln]
            lines += [Evidence(line=0, text=ln[:500], source="kernel") for ln in xids[-5:]]
        if node_evidence.check is not None:
            lines += [Evidence(line=0, text=f"{c.name}: {c.summary}", source="node-check")
                      for c in node_evidence.check.checks if c.status == "FAIL"]
    evidence = lines[:MAX_ALARM_LINES] or [Evidence(line=0, text=f"alarm {alarm}", source="alarm")]
    return Verdict(cause=cause, signature=signature, confidence=float(details.get("confidence", 0.9)), evidence=evidence)


@flow(name="node-alarm", flow_run_name="node-alarm-{node}-{alarm}")
def node_alarm(node: str, alarm: str, details: dict | None = None) -> FlowReport:
    log = get_run_logger()
    details = details or {}
    validate_node_name(node)
    ctx = build_context()
    try:
        return _node_alarm(ctx, log, node, alarm, details)
    finally:
        ctx.close()


def _node_alarm(ctx, log, node: str, alarm: str, details: dict) -> FlowReport:
    key = str(details.get("key") or details.get("event_id") or alarm)
    handle = journal.open_node_incident(ctx, node, key)
    if handle.status == "done":
        log.info("alarm %s on %s (key %s) was handled by incident %s: nothing to do", alarm, node, key, handle.id)
        return FlowReport(incident_id=handle.id, subject=f"node {node}", status="duplicate")
    try:
        with journal.incident_lock(ctx, handle.id):
            return _remediate(ctx, handle, node, alarm, details)
    except journal.IncidentBusy as busy:
        log.info("%s", busy)
        return FlowReport(incident_id=handle.id, subject=f"node {node}", status="busy")


def _remediate(ctx, handle, node: str, alarm: str, details: dict) -> FlowReport:
    from pitstop.policy.decide import Decision

    evidence = gather_node_evidence(ctx, node, handle.id)
    verdict = alarm_verdict(alarm, details, evidence)
    journal.save_verdict(ctx, handle.id, verdict)
    saved = journal.incident_decision(ctx, handle.id)
    if saved:
        decision = Decision.model_validate(saved)  # a re-run keeps the first run's plan
    else:
        decision = decide_remediation(ctx, handle.id, verdict, node=node, faulty_nodes=[node])
        journal.save_decision(ctx, handle.id, decision)

    def summary(lines, waiting=None) -> IncidentSummary:
        return IncidentSummary(incident_id=handle.id, subject_kind="node", subject=node, cluster=ctx.cluster_name,
                               mode=decision.mode, dry_run=decision.dry_run, verdict=verdict, nodes=[node],
                               actions=lines, explain=decision.explain(), problems=evidence.problems,
                               flow_run_url=ctx.flow_run_url, awaiting_approval=waiting)

    ticket_evidence = {"nodes": [evidence.model_dump(mode="json")]}
    outcome = carry_out(ctx, handle.id, decision,
                        lambda a: notify_incident(ctx, summary([], a.describe()), to_user=False),
                        lambda a, f: open_rma_ticket(ctx, handle.id, a, verdict, ticket_evidence, f))
    deliveries = notify_incident(ctx, summary(outcome.lines), to_user=False)
    journal.finish_notifications(ctx, handle.id, deliveries)
    journal.settle_notify_lines(outcome.lines, deliveries)
    journal.set_status(ctx, handle.id, "done")
    return FlowReport(incident_id=handle.id, subject=f"node {node}", status="done", verdict=verdict,
                      actions=outcome.lines, explain=decision.explain(),
                      notified=[f"{d.audience}: {d.status}" for d in deliveries], flow_run_url=ctx.flow_run_url)
