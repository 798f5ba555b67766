"""node_alarm: a node raised an alarm -> drain, diagnose, then resume / reboot / RMA (per policy).

The policy (pitstop.policy) turns the alarm into an ordered plan; a human-set (foreign) drain is
information only. Keyed by (cluster, node, alarm key): a repeated alarm does not double-act.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from flows.post_failure import FlowReport
from pitstop.models import Cause, Evidence, Verdict
from tasks import journal
from tasks.context import build_context
from tasks.decide import decide_remediation
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


def alarm_verdict(alarm: str, details: dict) -> Verdict:
    if details.get("cause") and details.get("signature"):
        cause, signature = Cause(details["cause"]), str(details["signature"])
    elif alarm.startswith("xid-"):
        cause, signature = Cause.GPU_HARDWARE, alarm
    else:
        cause, signature = ALARM_CAUSES.get(alarm, (Cause.NODE_FAILURE, alarm or "alarm"))
    lines = [str(x) for x in details.get("lines", [])][:20]
    evidence = [Evidence(line=0, text=t, source="alarm") for t in lines] or [
        Evidence(line=0, text=f"alarm {alarm}", source="alarm")]
    return Verdict(cause=cause, signature=signature, confidence=float(details.get("confidence", 0.9)), evidence=evidence)


@flow(name="node-alarm", flow_run_name="node-alarm-{node}")
def node_alarm(node: str, alarm: str, details: dict | None = None) -> FlowReport:
    log = get_run_logger()
    details = details or {}
    ctx = build_context()
    key = str(details.get("key") or details.get("event_id") or alarm)
    handle = journal.open_node_incident(ctx, node, key)
    if handle.status == "done":
        return FlowReport(incident_id=handle.id, subject=f"node {node}", status="duplicate")
    verdict = alarm_verdict(alarm, details)
    try:
        with journal.incident_lock(ctx, handle.id):
            journal.save_verdict(ctx, handle.id, verdict)
            from pitstop.policy.decide import Decision

            saved = journal.incident_decision(ctx, handle.id)
            decision = Decision.model_validate(saved) if saved else decide_remediation(ctx, handle.id, verdict, node=node, faulty_nodes=[node])
            if not saved:
                journal.save_decision(ctx, handle.id, decision)

            def summary(lines, waiting=None):
                return IncidentSummary(incident_id=handle.id, subject_kind="node", subject=node, cluster=ctx.cluster_name,
                                       mode=decision.mode, dry_run=decision.dry_run, verdict=verdict, nodes=[node],
                                       actions=lines, explain=decision.explain(), flow_run_url=ctx.flow_run_url,
                                       awaiting_approval=waiting)

            outcome = carry_out(ctx, handle.id, decision,
                                lambda a: notify_incident(ctx, summary([], a.describe()), to_user=False),
                                lambda a, f: open_rma_ticket(ctx, handle.id, a, verdict, {"nodes": []}, f))
            deliveries = notify_incident(ctx, summary(outcome.lines), to_user=False)
            journal.finish_notifications(ctx, handle.id, deliveries)
            journal.settle_notify_lines(outcome.lines, deliveries)
            journal.set_status(ctx, handle.id, "done")
    except journal.IncidentBusy as busy:
        log.info("%s", busy)
        return FlowReport(incident_id=handle.id, subject=f"node {node}", status="busy")
    return FlowReport(incident_id=handle.id, subject=f"node {node}", status="done", verdict=verdict,
                      actions=outcome.lines, explain=decision.explain(),
                      notified=[f"{d.audience}: {d.status}" for d in deliveries], flow_run_url=ctx.flow_run_url)
