"""node_alarm: a node raised an alarm -> drain, diagnose, then resume / reboot / RMA (per policy).

The policy (pitstop.policy) turns the alarm into an ordered plan (drain, escalation rung such as
reset or reboot, DCGM diag at the policy's level plus the node check with InfiniBand, resume
only if the diagnostics passed, RMA ticket after approval). A human-set (foreign) drain is
information only. Keyed by (cluster, node, alarm key): a repeated alarm does not double-act.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from pydantic import BaseModel, ConfigDict, Field

from flows.remediation import FlowReport, IncidentSubject, end_of_run, on_cancelled, remediate
from pitstop.cluster.base import validate_node_name
from pitstop.models import Cause, Evidence, Verdict
from pitstop.node.xid import XID_CATALOG, Implicates, parse_kernel_log
from tasks import journal
from tasks.context import build_context
from tasks.evidence import NodeEvidence, gather_node_evidence

# alarm name -> (cause, signature) when the alarm does not carry a signature itself
ALARM_CAUSES: dict[str, tuple[Cause, str]] = {
    "prolog_failed": (Cause.NODE_FAILURE, "prolog-failed"),
    "health_check_failed": (Cause.NODE_FAILURE, "health-check-failed"),
    "node_down": (Cause.NODE_FAILURE, "node-down"),
}
MAX_ALARM_LINES = 20


class AlarmDetails(BaseModel):
    """The `details` of a pitstop.node.alarm (NodeAlarm.to_wire puts key and summary in)."""

    model_config = ConfigDict(extra="allow")

    key: str | None = None
    event_id: str | None = None
    summary: str | None = None
    cause: Cause | None = None
    signature: str | None = None
    confidence: float = Field(default=0.9, ge=0, le=1)
    lines: list[str] = Field(default_factory=list)


def _primary_xid(kernel_lines: list[str], sympathetic: int) -> int | None:
    """The newest Xid in the node's recent kernel lines that is not itself sympathetic: NVIDIA's
    catalog says Xid 45 (preemptive cleanup) follows the Xid that caused it."""
    for event in reversed(parse_kernel_log("\n".join(kernel_lines)).events):
        info = XID_CATALOG.get(event.xid)
        if event.xid != sympathetic and info is not None and info.implicates is not Implicates.SYMPATHETIC:
            return event.xid
    return None


def alarm_verdict(alarm: str, details: AlarmDetails | dict, node_evidence: NodeEvidence | None = None) -> Verdict:
    """What the alarm says, plus the node's own Xid lines and failing checks as evidence."""
    details = details if isinstance(details, AlarmDetails) else AlarmDetails.model_validate(details or {})
    if details.cause and details.signature:
        cause, signature = details.cause, details.signature
    elif alarm.startswith("xid-"):
        cause, signature = Cause.GPU_HARDWARE, alarm
    else:
        cause, signature = ALARM_CAUSES.get(alarm, (Cause.NODE_FAILURE, alarm or "alarm"))
    lines = [Evidence(line=0, text=str(x)[:500], source="alarm") for x in details.lines]
    if node_evidence is not None:
        if node_evidence.kernel_log and node_evidence.kernel_lines:
            with open(node_evidence.kernel_log, encoding="utf-8", errors="replace") as handle:
                xids = [ln for ln in handle.read().splitlines() if "NVRM: Xid" in ln]
            lines += [Evidence(line=0, text=ln[:500], source="kernel") for ln in xids[-5:]]
            xid = int(signature[4:]) if signature[4:].isdigit() and signature.startswith("xid-") else None
            if xid in XID_CATALOG and XID_CATALOG[xid].implicates is Implicates.SYMPATHETIC:
                primary = _primary_xid(xids, xid)
                if primary is not None:  # follow the Xid that caused it, not a new incident type
                    signature = f"xid-{primary}"
        if node_evidence.check is not None:
            lines += [Evidence(line=0, text=f"{c.name}: {c.summary}", source="node-check")
                      for c in node_evidence.check.checks if c.status == "FAIL"]
    evidence = lines[:MAX_ALARM_LINES] or [Evidence(line=0, text=f"alarm {alarm}", source="alarm")]
    return Verdict(cause=cause, signature=signature, confidence=details.confidence, evidence=evidence)


@flow(name="node-alarm", flow_run_name="node-alarm-{node}-{alarm}", on_cancellation=[on_cancelled])
def node_alarm(node: str, alarm: str, details: dict | None = None) -> FlowReport:
    log = get_run_logger()
    validate_node_name(node)
    parsed = AlarmDetails.model_validate(details or {})
    ctx = build_context()
    try:
        return end_of_run(_node_alarm(ctx, log, node, alarm, parsed))  # named for the approval answer
    finally:
        ctx.close()


def _node_alarm(ctx, log, node: str, alarm: str, details: AlarmDetails) -> FlowReport:
    key = str(details.key or details.event_id or alarm)
    handle = journal.open_node_incident(ctx, node, key)
    try:
        with journal.incident_lock(ctx, handle.id) as status:  # read under the lock: never stale
            if status == "done" or (status is None and handle.status == "done"):
                log.info("alarm %s on %s (key %s) was handled by incident %s: nothing to do", alarm, node, key, handle.id)
                return FlowReport(incident_id=handle.id, subject=f"node {node}", status="duplicate")
            evidence = gather_node_evidence(ctx, node, handle.id)
            verdict = alarm_verdict(alarm, details, evidence)
            subject = IncidentSubject(kind="node", name=node, node=node, nodes=[node], faulty_nodes=[node],
                                      tell_user=False)
            return remediate(ctx, handle.id, subject, verdict, problems=evidence.problems,
                             ticket_evidence={"nodes": [evidence.model_dump(mode="json")]})
    except journal.IncidentBusy as busy:
        log.info("%s", busy)
        return FlowReport(incident_id=handle.id, subject=f"node {node}", status="busy")
