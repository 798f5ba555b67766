"""The words of a remediation notification (pure: no I/O)."""

from __future__ import annotations

from datetime import datetime, timezone

from pydantic import BaseModel, Field

from pitstop.models import Verdict


class ActionLine(BaseModel):
    kind: str
    target: str
    state: str = Field(description="done | would_do | failed | denied | awaiting_approval | skipped ...")
    detail: str = ""


class IncidentSummary(BaseModel):
    incident_id: int | str
    subject_kind: str = Field(description="job | node")
    subject: str = Field(description="job id or node name")
    cluster: str
    mode: str
    dry_run: bool = False
    verdict: Verdict | None = None
    user: str | None = None
    nodes: list[str] = Field(default_factory=list)
    actions: list[ActionLine] = Field(default_factory=list)
    explain: list[str] = Field(default_factory=list, description="why the policy chose this")
    problems: list[str] = Field(default_factory=list, description="evidence that was missing")
    flow_run_url: str | None = None
    awaiting_approval: str | None = None
    approval_deadline: datetime | None = Field(default=None, description="UTC; no answer by then = deny")
    approval_url: str | None = Field(default=None, description="the paused run's page (default: flow_run_url)")
    approval_why: list[str] = Field(default_factory=list, description="why the action needs a human")
    approval_markdown: str | None = Field(default=None, description="what the approval form shows")
    switch_storm: str | None = Field(default=None, description="the leaf switch whose storm this notice opens")


_STATE_WORDS = {
    "done": "done",
    "would_do": "would do (not executed: {why})",
    "failed": "FAILED",
    "denied": "denied",
    "awaiting_approval": "WAITING FOR APPROVAL",
    "skipped": "not done",
    "blocked": "blocked",
}


def render(summary: IncidentSummary, max_evidence: int = 12) -> tuple[str, str]:
    """(subject, body) for ops and users: cause, evidence lines, actions, mode, link."""
    verdict = summary.verdict
    cause = f"{verdict.cause.value} ({verdict.signature})" if verdict else "not classified"
    head = "APPROVAL NEEDED: " if summary.awaiting_approval else ""
    subject = f"{head}[pitstop {summary.cluster}] {summary.subject_kind} {summary.subject}: {cause}"
    if summary.switch_storm:
        subject += f" - SWITCH STORM on {summary.switch_storm}"
    why_not = "dry run" if summary.dry_run else f"{summary.mode} mode"
    lines = [
        f"{summary.subject_kind.capitalize()} {summary.subject} on cluster {summary.cluster}",
        f"Cause: {cause}" + (f", confidence {verdict.confidence:.2f}" if verdict else ""),
    ]
    if verdict and verdict.hint:
        lines.append(f"Hint: {verdict.hint}")
    if verdict and verdict.decided_by:
        lines.append(f"Decided by: {verdict.decided_by}")
    for alt in (verdict.alternatives if verdict else [])[:3]:
        lines.append(f"Or {alt.cause.value} ({alt.confidence:.2f}): {alt.tells_apart}")
    if summary.user:
        lines.append(f"User: {summary.user}")
    if summary.nodes:
        lines.append(f"Nodes: {', '.join(summary.nodes)}")
    lines.append(f"Mode: {summary.mode}{' (dry run: nothing is changed)' if summary.dry_run else ''}")
    if summary.awaiting_approval:
        lines += ["", f"Waiting for approval: {summary.awaiting_approval}"]
        if summary.approval_why:
            lines.append(f"Needs approval because: {'; '.join(summary.approval_why)}")
        if summary.approval_deadline is not None:
            deadline = summary.approval_deadline.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
            lines.append(f"Deadline: {deadline} (no answer by then = deny)")
        url = summary.approval_url or summary.flow_run_url
        if url:
            lines.append(f"Answer it on the paused run's page (Resume: approve or deny; Cancel: deny and stop): {url}")
        else:
            lines.append("Answer it in the Prefect UI (Resume on the paused run; no answer before the deadline = deny).")
        lines.append(f"Or from a terminal: pitstop approvals approve|deny {summary.incident_id} --comment \"...\"")
    if verdict and verdict.evidence:
        lines += ["", "Evidence:"]
        for ev in verdict.evidence[:max_evidence]:
            where = f"{ev.source}:{ev.line}" if ev.line else ev.source
            lines.append(f"  {where}: {ev.text[:300]}")
        if len(verdict.evidence) > max_evidence:
            lines.append(f"  ... {len(verdict.evidence) - max_evidence} more in the incident record")
    lines += ["", "Done so far:" if summary.awaiting_approval else "Actions:"]
    if not summary.actions:
        lines.append("  nothing yet" if summary.awaiting_approval else "  none")
    for action in summary.actions:
        state = _STATE_WORDS.get(action.state, action.state).format(why=why_not)
        lines.append(f"  {action.kind} {action.target}: {state}{' - ' + action.detail if action.detail else ''}")
    if summary.explain:
        lines += ["", "Why:"] + [f"  {line}" for line in summary.explain]
    if summary.problems:
        lines += ["", "Not available:"] + [f"  {p}" for p in summary.problems[:10]]
    lines += ["", f"Incident: {summary.incident_id}"]
    if summary.flow_run_url:
        lines.append(f"Flow run: {summary.flow_run_url}")
    return subject, "\n".join(lines) + "\n"
