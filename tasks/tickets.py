"""RMA tickets: a record with what a vendor needs, written to the DB and sent to the ops sink.

Idempotent across interruptions and hosts. Each ticket has a stable key, derived from the
incident's own key and the node, so every attempt and every worker sends the same one. It is in
the subject, in the JSON record, and in an `Idempotency-Key` header for apprise's HTTP sinks
(json://, form://, xml://: apprise sends `+Name=value` URL arguments as headers; the header is
the IETF httpapi draft "The Idempotency-Key HTTP Header Field"). The ticket row is journaled
`sending` before the request leaves and `sent` / `send_failed` once the sink answered. A run
killed in between leaves `sending`: the re-run sends again with the same key, marked
`"resend": true`, and a sink that keys tickets on it keeps one ticket.
"""

from __future__ import annotations

import hashlib
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
# apprise's custom HTTP notifications, which turn `+Name=value` URL arguments into headers
HEADER_SCHEMES = frozenset({"json", "jsons", "form", "forms", "xml", "xmls"})


def ticket_key(incident_key: str, node: str) -> str:
    """The same for every attempt, worker and host that sends this incident's ticket for `node`."""
    return "pitstop-rma-" + hashlib.sha256(f"{incident_key}\n{node}".encode()).hexdigest()[:24]


def with_idempotency_key(url: str, key: str) -> str:
    """`url` with an Idempotency-Key header for sinks that take headers; others get it unchanged
    (the key is in the subject and the body for them)."""
    if url.split("://", 1)[0].lower() not in HEADER_SCHEMES:
        return url
    return f"{url}{'&' if '?' in url else '?'}+Idempotency-Key={key}"


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
    ticket = journal.create_ticket(
        ctx, incident_id, node,
        gpu_uuid=ident["gpu_uuid"], pci_bus=ident["pci_bus"], xid_history=ident["xid_history"],
        dcgm_results=facts.get("diag", {}).get(node, {}),
        evidence=[e.model_dump(mode="json") for e in verdict.evidence], status="approved",
    )
    ticket_id, key = ticket.id, ticket_key(ticket.incident_key, node)
    resend = ticket.status == "sending"  # an earlier run was killed before the sink's answer
    body = "\n".join([
        f"RMA request for node {node} (cluster {ctx.cluster_name}), incident {incident_id}",
        f"Ticket key: {key}" + (" (sent again: an earlier attempt was interrupted; same ticket)" if resend else ""),
        f"Cause: {verdict.cause.value} ({verdict.signature})",
        f"GPU: UUID {ident['gpu_uuid'] or 'unknown'}, PCI {ident['pci_bus'] or 'unknown'}",
        f"Xid history: {', '.join(str(x['xid']) for x in ident['xid_history']) or 'none seen'}",
        "Evidence:", *[f"  {e.source}:{e.line}: {e.text[:300]}" for e in verdict.evidence[:10]],
        "", "Ticket record (JSON):",
        json.dumps({"ticket_id": ticket_id, "ticket_key": key, "resend": resend, "cluster": ctx.cluster_name,
                    "node": node, "incident_id": incident_id,
                    "gpu_uuid": ident["gpu_uuid"], "pci_bus": ident["pci_bus"], "xid_history": ident["xid_history"],
                    "dcgm_results": facts.get("diag", {}).get(node, {}), "signature": verdict.signature}, default=str),
    ])
    urls = [with_idempotency_key(u, key) for u in ctx.settings.pipeline.ticket_urls or ctx.settings.notify.urls]
    if urls:
        journal.update_ticket(ctx, ticket_id, status="sending")  # before: a re-run knows a send began
        subject = f"[pitstop RMA] {node}: {verdict.signature} [{key}]"
        outcome = send(Notification(subject=subject, body=body), urls, ctx.settings.notify.timeout_s)
        status, sink = ("sent" if outcome.ok else "send_failed"), outcome.summary
    else:
        status, sink = "approved", "no ticket sink configured: recorded in the database only"
    journal.update_ticket(ctx, ticket_id, status=status, sink_result=sink)  # after: the sink's answer
    again = " (sent again after an interrupted send, same key)" if resend else ""
    return journal.TicketResult(ok=True, summary=f"RMA ticket {ticket_id} ({key}) for {node}{again}: {sink}",
                                ticket_id=ticket_id)
