"""Approvals in the Prefect UI: pause the flow run with a small form; no answer in time = deny.

Called from the flow body (Prefect pauses flow runs, not task runs).

The form says what is being approved: an `ApprovalRequest` (incident, subject, nodes, cause,
evidence, the proposed action, why it needs a human, blast radius, deadline, mode, link) is
rendered as markdown and saved as the run input's description, which the UI's Resume dialog
shows above the fields; the same text is a markdown artifact on the run. The answer is a
required choice (approve / deny) plus an optional comment.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Literal

from prefect.flow_runs import pause_flow_run
from prefect.input import RunInput
from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from pitstop.policy.decide import Decision, PlannedAction
    from tasks.context import PipelineContext

MAX_EVIDENCE = 5  # "a few": the incident record and the notification have the rest
MAX_EVIDENCE_CHARS = 240

_BLOCK_WORDS = {
    "blast_radius": "over the blast radius",
    "breaker_open": "circuit breaker open",
    "last_healthy": "would drain the last healthy node(s)",
}


class ApprovalForm(RunInput):
    """Shown in the Prefect UI when a risky action waits for a human."""

    decision: Literal["approve", "deny"] = Field(
        description="approve: run this action now; deny: do not (no answer before the deadline = deny)"
    )
    comment: str = Field(default="", description="why (kept in the incident's action journal)")


class ApprovalOutcome(BaseModel):
    approved: bool
    comment: str = ""
    timed_out: bool = False

    @property
    def note(self) -> str:
        """For the journal, after its "approved"/"denied" word."""
        return "no answer before the approval timeout (no answer = deny)" if self.timed_out else self.comment

    @property
    def summary(self) -> str:
        if self.timed_out:
            return "no answer before the approval timeout: denied"
        word = "approved" if self.approved else "denied"
        return f"{word}{': ' + self.comment if self.comment else ''}"


class EvidenceLine(BaseModel):
    source: str = "log"
    line: int = 0
    text: str

    def where(self) -> str:
        return f"{self.source}:{self.line}" if self.line else self.source


class BlastRadiusInfo(BaseModel):
    """What this decision takes out, against the policy's limits (when they could be read)."""

    nodes_changed: list[str] = Field(default_factory=list, description="nodes this decision drains/reboots/resets")
    max_nodes_per_hour: int | None = None
    max_partition_percent: float | None = None
    detail: str = Field(default="", description="the guard's own numbers when one asked for this approval")


class ApprovalRequest(BaseModel):
    """Everything a human needs to answer one approval, in one typed record."""

    key: str = Field(description="pause key, unique per incident and action")
    incident_id: int | str
    subject_kind: str = Field(default="job", description="job | node")
    subject: str = Field(default="", description="job id or node name")
    cluster: str | None = None
    nodes: list[str] = Field(default_factory=list)
    cause: str | None = None
    signature: str | None = None
    confidence: float | None = None
    rule: str | None = None
    evidence: list[EvidenceLine] = Field(default_factory=list)
    evidence_total: int = 0
    action: str = Field(description="the action's describe() text (with its state and why)")
    action_summary: str = Field(default="", description="what it does, e.g. 'reboot gpu03 reason \"...\"'")
    action_kind: str
    action_target: str
    action_seq: int | None = None
    action_reason: str | None = Field(default=None, description="drain/reboot reason it will carry")
    why: list[str] = Field(default_factory=list, description="why it needs approval: policy, guard")
    blocked_by: str | None = None
    blast_radius: BlastRadiusInfo | None = None
    mode: str = ""
    dry_run: bool = False
    timeout_s: int
    deadline: datetime = Field(description="UTC; no answer by then = deny")
    flow_run_id: str | None = None
    flow_run_url: str | None = None

    @property
    def artifact_key(self) -> str:
        """Prefect artifact keys: lowercase letters, digits and dashes only."""
        raw = f"approval-{self.key}-{self.action_kind}".lower()
        return re.sub(r"[^a-z0-9]+", "-", raw).strip("-")

    def seconds_left(self, now: datetime | None = None) -> int:
        now = now or datetime.now(timezone.utc)
        return max(1, math.ceil((self.deadline - now).total_seconds()))

    def deadline_text(self) -> str:
        return self.deadline.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")

    def cause_text(self, code=lambda text: text) -> str:
        if not self.cause:
            return "not classified"
        text = f"{code(self.cause)} ({code(self.signature)})" if self.signature else code(self.cause)
        return text + (f", confidence {self.confidence:.2f}" if self.confidence is not None else "")

    def markdown(self) -> str:
        """For the Resume dialog, the run's artifact and rich notifications."""
        subject = f"{self.subject_kind} {_code(self.subject)}" if self.subject else self.subject_kind
        where = f" on cluster {_code(self.cluster)}" if self.cluster else ""
        mode = f"**{_plain(self.mode)}**" + (" (dry run: nothing is changed)" if self.dry_run else "")
        what = self.action_summary or self.action
        lines = [
            f"### Approve {_code(what)}?",
            "",
            f"Incident **{_plain(str(self.incident_id))}**: {subject}{where}, mode {mode}.",
            "",
            f"- **Node(s):** {', '.join(_code(n) for n in self.nodes) or 'none'}",
            f"- **Cause:** {self.cause_text(_code)}" + (f" (rule {_code(self.rule)})" if self.rule else ""),
            f"- **Proposed action:** {_code(what)} (kind {_code(self.action_kind)}, "
            f"target {_code(self.action_target)})",
        ]
        if self.action_reason:
            lines.append(f"- **Reason it will carry:** {_code(self.action_reason)}")
        lines.append(f"- **Needs approval because:** {_plain('; '.join(self.why) or 'the policy asks for it')}")
        radius = self.blast_radius
        if radius is not None:
            parts = [f"this decision changes {len(radius.nodes_changed)} node(s)"
                     + (f" ({', '.join(radius.nodes_changed)})" if radius.nodes_changed else "")]
            if radius.max_nodes_per_hour is not None:
                parts.append(f"limit {radius.max_nodes_per_hour} drains/hour")
            if radius.max_partition_percent is not None:
                parts.append(f"{radius.max_partition_percent:g}% of a partition")
            if radius.detail:
                parts.append(radius.detail)
            lines.append(f"- **Blast radius:** {_plain('; '.join(parts))}")
        lines.append(f"- **Deadline:** {self.deadline_text()} (no answer by then = deny)")
        if self.evidence:
            lines += ["", f"**Evidence** ({len(self.evidence)} of {max(self.evidence_total, len(self.evidence))} lines):", ""]
            body = "\n".join(f"{e.where()}: {e.text}" for e in self.evidence)
            fence = "```"
            while fence in body:
                fence += "`"
            lines += [f"{fence}text", body, fence]
        else:
            lines += ["", "**Evidence:** none recorded"]
        lines.append("")
        links = [f"[flow run]({self.flow_run_url})"] if self.flow_run_url else []
        links.append(f"incident {_plain(str(self.incident_id))}: `pitstop incidents --explain`")
        lines.append("Links: " + " · ".join(links))
        return "\n".join(lines) + "\n"


def _plain(text: str) -> str:
    """Markdown-inert text (names and messages come from logs, schedulers and policy files)."""
    return re.sub(r"([\\`*\[\]<>])", r"\\\1", text or "")


def _code(text: str | None) -> str:
    return f"`{(text or '').replace('`', chr(39))}`"


def _evidence_lines(items: list[Any]) -> list[EvidenceLine]:
    lines = []
    for item in items:
        try:
            data = item.model_dump(mode="json") if hasattr(item, "model_dump") else dict(item)
            line = int(data.get("line") or 0)
        except (TypeError, ValueError):  # not an Evidence: show it as text rather than fail the ask
            data, line = {"text": str(item)}, 0
        text = " ".join(str(data.get("text", "")).split())
        if len(text) > MAX_EVIDENCE_CHARS:
            text = text[: MAX_EVIDENCE_CHARS - 3] + "..."
        lines.append(EvidenceLine(source=str(data.get("source") or "log"), line=line, text=text))
    return lines


def _what(action: "PlannedAction") -> str:
    """describe() without its state prefix and reasons: what the action does."""
    plain = action.model_copy(update={"needs_approval": False, "blocked_by": None, "execute": True})
    return plain.describe().removeprefix("doing: ")


def build_request(
    ctx: "PipelineContext",
    incident_id: int | str,
    decision: "Decision",
    action: "PlannedAction",
    key: str,
    evidence: list[Any] | None = None,
    now: datetime | None = None,
) -> ApprovalRequest:
    """The request for `action` of `decision`. Evidence defaults to what the incident recorded."""
    from pitstop.policy.model import NODE_CHANGING

    incident = None
    try:
        from pitstop.store import records

        incident = records.get_incident(ctx.store, int(incident_id))
    except Exception:  # the form still says what is asked, without the record's extras
        pass
    if evidence is None:
        evidence = list(incident.evidence) if incident is not None else []
    nodes = list(decision.faulty_nodes) or list(getattr(incident, "nodes", None) or [])
    if action.target_type == "node" and action.target not in nodes:
        nodes.append(action.target)
    if decision.job_id:
        subject_kind, subject = "job", decision.job_id
    else:
        subject_kind, subject = "node", decision.node or action.target
    why = [action.approval_why] if action.approval_why else []
    blocked = action.blocked_by.value if action.blocked_by is not None else None
    if blocked:
        words = _BLOCK_WORDS.get(blocked, blocked)
        why.append(f"{words}: {action.blocked_why}" if action.blocked_why else words)
    changed = sorted({a.target for a in decision.actions if a.kind in NODE_CHANGING and a.disposition in {"run", "ask"}})
    radius = BlastRadiusInfo(nodes_changed=changed,
                             detail=action.blocked_why if blocked in _BLOCK_WORDS else "")
    try:
        from pitstop.policy.model import policy_from_settings

        limits = policy_from_settings(ctx.settings).blast_radius
        radius.max_nodes_per_hour, radius.max_partition_percent = limits.max_nodes_per_hour, limits.max_partition_percent
    except Exception:  # an unreadable policy file: the numbers are "not known"
        pass
    timeout_s = int(ctx.settings.pipeline.approval_timeout_s)
    now = now or datetime.now(timezone.utc)
    run_id, run_url = ctx.flow_run_id, ctx.flow_run_url
    if run_id is None:
        from tasks.runinfo import current_flow_run

        run_id, run_url = current_flow_run()
    return ApprovalRequest(
        key=key, incident_id=incident_id, subject_kind=subject_kind, subject=subject,
        cluster=ctx.cluster_name, nodes=nodes, cause=decision.cause.value, signature=decision.signature,
        confidence=decision.confidence, rule=decision.rule, evidence=_evidence_lines(evidence[:MAX_EVIDENCE]),
        evidence_total=len(evidence), action=action.describe(), action_summary=_what(action),
        action_kind=action.kind.value, action_target=action.target, action_seq=action.seq, action_reason=action.reason, why=why,
        blocked_by=blocked, blast_radius=radius, mode=decision.mode, dry_run=decision.dry_run,
        timeout_s=timeout_s, deadline=now + timedelta(seconds=timeout_s), flow_run_id=run_id,
        flow_run_url=run_url,
    )


# --- the request being announced, for the notification step --------------------------------
# The flows' ask_approval(action) callbacks build the "approval needed" notification without the
# request; notify_incident fills the deadline and the link in from here while it is announced.

_announcing: dict[str, ApprovalRequest] = {}
_announcing_lock = threading.Lock()


@contextmanager
def announcing(request: ApprovalRequest | None) -> Iterator[None]:
    if request is None:
        yield
        return
    name = str(request.incident_id)
    with _announcing_lock:
        _announcing[name] = request
    try:
        yield
    finally:
        with _announcing_lock:
            if _announcing.get(name) is request:
                del _announcing[name]


def announced_request(incident_id: int | str) -> ApprovalRequest | None:
    with _announcing_lock:
        return _announcing.get(str(incident_id))


# --- pausing ---------------------------------------------------------------------------------


def approval_form(request: ApprovalRequest | None, key: str, timeout_s: int) -> type[ApprovalForm]:
    """The form class to pause with: its description is what the UI shows above the fields."""
    if request is not None:
        return ApprovalForm.with_initial_data(description=request.markdown())
    deadline = (datetime.now(timezone.utc) + timedelta(seconds=timeout_s)).strftime("%Y-%m-%d %H:%M:%S UTC")
    return ApprovalForm.with_initial_data(
        description=f"### Approve `{key}`?\n\n- **Deadline:** {deadline} (no answer by then = deny)\n"
    )


def publish_artifact(request: ApprovalRequest) -> None:
    """The same text as a markdown artifact on the run (its Artifacts tab, and the Artifacts page)."""
    try:
        from prefect.artifacts import create_markdown_artifact

        create_markdown_artifact(
            markdown=request.markdown(), key=request.artifact_key,
            description=f"approval asked: {request.action_summary or request.action} (incident {request.incident_id})",
        )
    except Exception:  # cosmetic: the form itself carries the same text
        pass


def wait_for_approval(key: str, timeout_s: int, request: ApprovalRequest | None = None) -> ApprovalOutcome:
    """Pause until someone answers the form for `key` (unique per incident and action).

    With a `request`, the form shows it and the pause ends at its deadline (which the
    notification already announced), else after `timeout_s`.
    """
    from prefect.exceptions import FlowPauseTimeout

    if request is not None:
        timeout_s = request.seconds_left()
        publish_artifact(request)
    # Prefect polls at most every poll_interval; short test timeouts need a short poll.
    poll = max(1, min(5, timeout_s // 4 or 1))
    try:
        form = pause_flow_run(
            wait_for_input=approval_form(request, key, timeout_s), timeout=timeout_s, key=key, poll_interval=poll
        )
    except FlowPauseTimeout:
        _leave_paused_state()
        return ApprovalOutcome(approved=False, timed_out=True)
    except Exception as exc:  # cannot pause (no server, resumed without input...): never act
        return ApprovalOutcome(approved=False, comment=f"could not wait for approval ({exc.__class__.__name__}: {exc})")
    if form is None:
        return ApprovalOutcome(approved=False, comment="resumed without an answer")
    return ApprovalOutcome(approved=form.decision == "approve", comment=form.comment or "")


def _leave_paused_state() -> None:
    """After a timeout the server still shows the run as Paused; mark it Running again so the UI
    does not offer a form whose answer nobody will read (the action is already denied)."""
    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext
    from prefect.states import Running

    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return
    try:
        with get_client(sync_client=True) as client:
            client.set_flow_run_state(
                context.flow_run.id, Running(message="approval timed out: denied"), force=True
            )
    except Exception:  # the UI state is cosmetic; the journal already says "denied"
        pass
