"""Tell ops (and the job's user where known) what happened, through pitstop.notify (apprise)."""

from __future__ import annotations

import json
import os
import time

from prefect import task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel

from pitstop.notify import Notification, NotifyOutcome, send
from tasks.context import PipelineContext
from tasks.message import IncidentSummary, render


class Delivery(BaseModel):
    audience: str  # ops | user
    status: str
    summary: str
    outbox_file: str | None = None


def _outbox(ctx: PipelineContext, audience: str, summary: IncidentSummary, subject: str, body: str) -> str | None:
    """Keep every notification as a JSON file too: the demo's inbox and an audit trail."""
    if not ctx.settings.pipeline.outbox:
        return None
    outbox = ctx.settings.home / "outbox"
    outbox.mkdir(parents=True, exist_ok=True)
    path = outbox / f"{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**9:09d}-incident-{summary.incident_id}-{audience}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps({"audience": audience, "subject": subject, "body": body, "incident": summary.incident_id}, indent=1),
        encoding="utf-8",
    )
    os.replace(tmp, path)
    return str(path)


@task(name="notify", cache_policy=NO_CACHE)
def notify_incident(ctx: PipelineContext, summary: IncidentSummary, to_user: bool = True,
                    ops_told_by: int | None = None) -> list[Delivery]:
    """`ops_told_by`: the fabric incident that already told ops about this one (a switch storm:
    one notice for the switch, not one per job)."""
    subject, body = render(summary, ctx.settings.pipeline.max_evidence_lines)
    targets: list[tuple[str, list[str]]] = [] if ops_told_by is not None else [("ops", list(ctx.settings.notify.urls))]
    template = ctx.settings.pipeline.user_notify_url
    if to_user and summary.user and template:
        targets.append(("user", [template.replace("{user}", summary.user)]))
    deliveries: list[Delivery] = []
    if ops_told_by is not None:
        deliveries.append(Delivery(audience="ops", status="skipped",
                                   summary=f"ops were told with fabric incident {ops_told_by}"))
    for audience, urls in targets:
        outbox_file = _outbox(ctx, audience, summary, subject, body)
        if urls:
            outcome: NotifyOutcome = send(
                Notification(subject=subject, body=body), urls, ctx.settings.notify.timeout_s
            )
            deliveries.append(Delivery(audience=audience, status=str(outcome.status), summary=outcome.summary, outbox_file=outbox_file))
        else:
            deliveries.append(
                Delivery(audience=audience, status="skipped", summary="no notify URLs configured", outbox_file=outbox_file)
            )
    return deliveries
