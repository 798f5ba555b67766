"""RMA tickets: a record with what a vendor needs, written to the DB and sent to the ops sink."""

from __future__ import annotations

import json
import re

from prefect import task
from prefect.cache_policies import NO_CACHE

from pitstop.models import Verdict
from pitstop.notify import Notification, send
from pitstop.policy.decide import PlannedAction
from tasks import journal
from tasks.context import PipelineContext

_PCI_RE = re.compile(r"PCI:([0-9a-fA-F:.]+)")
_UUID_RE = re.compile(r"GPU-[0-9a-fA-F-]{36}")
_XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)")


def _gpu_identity(evidence: dict, node: str) -> dict:
    lines = []
    for n in evidence.get("nodes", []):
        if n.get("node") == node and n.get("kernel_log"):
            try:
                with open(n["kernel_log"], encoding="utf-8", errors="replace") as handle:
                    lines = handle.read().splitlines()
            except OSError:
                lines = []
    xids = [{"pci": m.group(1), "xid": int(m.group(2)), "line": line} for line in lines if (m := _XID_RE.search(line))]
    uuid = next((m.group(0) for line in lines if (m := _UUID_RE.search(line))), None)
    pci = xids[-1]["pci"] if xids else next((m.group(1) for line in lines if (m := _PCI_RE.search(line))), None)
    return {"xid_history": xids, "gpu_uuid": uuid, "pci_bus": pci}


@task(name="act-rma_ticket", cache_policy=NO_CACHE, task_run_name="rma-ticket-{action.target}")
def open_rma_ticket(ctx: PipelineContext, incident_id: int, action: PlannedAction, verdict: Verdict,
                    evidence: dict, facts: dict) -> journal.TicketResult:
    node = action.target
    ident = _gpu_identity(evidence, node)
    ticket_id = journal.create_ticket(
        ctx, incident_id, node,
        gpu_uuid=ident["gpu_uuid"], pci_bus=ident["pci_bus"], xid_history=ident["xid_history"],
        dcgm_results=facts.get("diag", {}).get(node, {}),
        evidence=[e.model_dump(mode="json") for e in verdict.evidence], status="approved",
    )
    body = "\n".join([
        f"RMA request for node {node} (cluster {ctx.cluster_name}), incident {incident_id}",
        f"Cause: {verdict.cause.value} ({verdict.signature})",
        f"GPU: UUID {ident['gpu_uuid'] or 'unknown'}, PCI {ident['pci_bus'] or 'unknown'}",
        f"Xid history: {', '.join(str(x['xid']) for x in ident['xid_history']) or 'none seen'}",
        "Evidence:", *[f"  {e.source}:{e.line}: {e.text[:300]}" for e in verdict.evidence[:10]],
        "", "Ticket record (JSON):",
        json.dumps({"ticket_id": ticket_id, "cluster": ctx.cluster_name, "node": node, "incident_id": incident_id,
                    "gpu_uuid": ident["gpu_uuid"], "pci_bus": ident["pci_bus"], "xid_history": ident["xid_history"],
                    "dcgm_results": facts.get("diag", {}).get(node, {}), "signature": verdict.signature}, default=str),
    ])
    urls = list(ctx.settings.pipeline.ticket_urls or ctx.settings.notify.urls)
    if urls:
        outcome = send(Notification(subject=f"[pitstop RMA] {node}: {verdict.signature}", body=body), urls, ctx.settings.notify.timeout_s)
        status, sink = ("sent" if outcome.ok else "send_failed"), outcome.summary
    else:
        status, sink = "approved", "no ticket sink configured: recorded in the database only"
    journal.update_ticket(ctx, ticket_id, status=status, sink_result=sink)
    return journal.TicketResult(ok=True, summary=f"RMA ticket {ticket_id} for {node}: {sink}", ticket_id=ticket_id)
