"""Approvals in the Prefect UI: one question per consent-needing plan; no answer in time = deny.

Called from the flow body (Prefect pauses flow runs, not task runs).

The form says what is being approved: an `ApprovalRequest` (incident, subject, nodes, cause,
evidence, every step that needs consent, why, blast radius, deadline, mode, link) is rendered
as markdown and saved as the run input's description, which the UI's Resume dialog shows above
the fields; the same text is a markdown artifact on the run. The answer is a required choice
(approve / deny), the answerer's name (Prefect's open-source server has no user accounts, so
the form asks) and an optional comment. **Cancel** on the paused run is a denial that also
stops the run: nothing after it runs.

The wait is our own poll of the flow run's state rather than `pause_flow_run`, because that one
sees neither Cancel (it waits on in Cancelling) nor the difference between "nobody answered"
and "the server was unreachable for a moment" (an outage is not a denial).
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Literal

from prefect.input import RunInput
from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from pitstop.policy.decide import Decision, PlannedAction
    from tasks.context import PipelineContext

MAX_EVIDENCE = 5  # "a few": the incident record and the notification have the rest
MAX_EVIDENCE_CHARS = 240
MAX_POLL_S = 2.0  # how soon an answer (or Cancel) is seen; one cheap GET per poll

_BLOCK_WORDS = {
    "blast_radius": "over the blast radius",
    "breaker_open": "circuit breaker open",
    "last_healthy": "would drain the last healthy node(s)",
}

Answer = Literal["approved", "denied", "timed_out", "cancelled", "unanswered"]

# answer -> (Prefect state name of the run's end, tag on the run, words for people)
ANSWERS: dict[str, tuple[str, str, str]] = {
    "approved": ("Approved", "approval:approved", "approved"),
    "denied": ("Denied", "approval:denied", "denied"),
    "timed_out": ("Timed out", "approval:timed-out", "no answer before the approval timeout: denied"),
    "cancelled": ("Cancelled", "approval:cancelled", "cancelled in the Prefect UI: denied, nothing more runs"),
    "unanswered": ("Not answered", "approval:unanswered", "not answered: denied"),
}
# what the journal says after "denied: " when nobody chose deny
_NOTES = {"timed_out": "no answer before the approval timeout",
          "cancelled": "cancelled in the Prefect UI (Cancel = deny and stop)",
          "unanswered": "not answered"}
# The run's end shows the strongest "no": one denial in an incident is what the operator must see.
ANSWER_WEIGHT = {"cancelled": 4, "denied": 3, "timed_out": 2, "unanswered": 1, "approved": 0}


class ApprovalForm(RunInput):
    """Shown in the Prefect UI when steps wait for a human."""

    decision: Literal["approve", "deny"] = Field(
        description="approve: run the listed steps now; deny: do none of them "
        "(no answer before the deadline = deny; Cancel on the run = deny and stop)"
    )
    approver: str = Field(min_length=1, max_length=80, description="your name (kept in the incident's journal)")
    comment: str = Field(default="", max_length=2000, description="why (kept in the incident's journal)")


class ApprovalOutcome(BaseModel):
    answer: Answer
    comment: str = ""
    by: str | None = None

    @property
    def approved(self) -> bool:
        return self.answer == "approved"

    @property
    def timed_out(self) -> bool:
        return self.answer == "timed_out"

    @property
    def stops_the_run(self) -> bool:
        """Cancel: no remaining step runs, no escalation."""
        return self.answer == "cancelled"

    @property
    def state_name(self) -> str:
        return ANSWERS[self.answer][0]

    @property
    def tag(self) -> str:
        return ANSWERS[self.answer][1]

    @property
    def note(self) -> str:
        """For the journal, after its "approved/denied by WHO" words."""
        if self.answer in {"approved", "denied"}:
            return self.comment
        return _NOTES[self.answer] + (f" ({self.comment})" if self.comment else "")

    @property
    def summary(self) -> str:
        if self.answer in {"approved", "denied"}:
            who = f" by {self.by}" if self.by else ""
            return f"{self.answer}{who}{': ' + self.comment if self.comment else ''}"
        return ANSWERS[self.answer][2] + (f" ({self.comment})" if self.comment else "")


def strongest(outcomes: list[ApprovalOutcome]) -> ApprovalOutcome | None:
    return max(outcomes, key=lambda o: ANSWER_WEIGHT[o.answer], default=None)


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


class PlanStep(BaseModel):
    """One step the question covers."""

    seq: int
    kind: str
    target: str
    summary: str = Field(description="what it does, e.g. 'reboot gpu03 reason \"...\"'")
    why: list[str] = Field(default_factory=list, description="why it needs consent: policy, guard")

    def label(self) -> str:
        return f"{self.kind} {self.target}"


class ApprovalRequest(BaseModel):
    """Everything a human needs to answer one question, in one typed record."""

    key: str = Field(description="pause key, unique per incident and question")
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
    steps: list[PlanStep] = Field(default_factory=list, description="every step this answer covers")
    done_so_far: list[str] = Field(default_factory=list, description="steps of this plan already finished")
    action: str = Field(description="the first step's describe() text (with its state and why)")
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

    @property
    def seqs(self) -> list[int]:
        return [s.seq for s in self.steps] or ([self.action_seq] if self.action_seq is not None else [])

    def title(self) -> str:
        """What is asked, in one line (the mail's "Waiting for approval:" and the form's heading)."""
        labels = [s.summary for s in self.steps] or [self.action_summary or self.action]
        if len(labels) == 1:
            return labels[0]
        return f"{len(labels)} steps: " + ", then ".join(labels)

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
        several = len(self.steps) > 1
        what = self.action_summary or self.action
        heading = f"{len(self.steps)} steps" if several else _code(what)
        lines = [
            f"### Approve {heading}?",
            "",
            f"Incident **{_plain(str(self.incident_id))}**: {subject}{where}, mode {mode}.",
            "",
            f"- **Node(s):** {', '.join(_code(n) for n in self.nodes) or 'none'}",
            f"- **Cause:** {self.cause_text(_code)}" + (f" (rule {_code(self.rule)})" if self.rule else ""),
        ]
        if several:
            lines.append("- **Proposed steps** (one answer covers all of them, in this order):")
            lines += [f"    {n}. {_code(s.summary)}" + (f" - {_plain('; '.join(s.why))}" if s.why else "")
                      for n, s in enumerate(self.steps, 1)]
        else:
            lines.append(f"- **Proposed action:** {_code(what)} (kind {_code(self.action_kind)}, "
                         f"target {_code(self.action_target)})")
            if self.action_reason:
                lines.append(f"- **Reason it will carry:** {_code(self.action_reason)}")
            lines.append(f"- **Needs approval because:** {_plain('; '.join(self.why) or 'the policy asks for it')}")
        if self.done_so_far:
            lines.append(f"- **Already done:** {_plain('; '.join(self.done_so_far))}")
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
        lines.append("- **How to answer:** Resume, choose approve or deny, give your name; "
                     "Cancel on the run = deny and stop at once; or `pitstop approvals`")
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


def _why(action: "PlannedAction") -> tuple[list[str], str | None]:
    why = [action.approval_why] if action.approval_why else []
    blocked = action.blocked_by.value if action.blocked_by is not None else None
    if blocked:
        words = _BLOCK_WORDS.get(blocked, blocked)
        why.append(f"{words}: {action.blocked_why}" if action.blocked_why else words)
    return why, blocked


def question_key(incident_id: int | str, seqs: list[int]) -> str:
    """The pause key: the same steps of the same incident give the same key in a re-run."""
    if len(seqs) == 1:
        return f"incident-{incident_id}-action-{seqs[0]}"
    return f"incident-{incident_id}-actions-{'-'.join(str(s) for s in seqs)}"


def build_request(
    ctx: "PipelineContext",
    incident_id: int | str,
    decision: "Decision",
    actions: "list[PlannedAction] | PlannedAction",
    key: str | None = None,
    evidence: list[Any] | None = None,
    now: datetime | None = None,
    deadline: datetime | None = None,
    done_so_far: list[str] | None = None,
) -> ApprovalRequest:
    """The question for `actions` (the steps of `decision` it covers). Evidence defaults to what
    the incident recorded; `deadline` is kept when the same question was asked before."""
    from pitstop.policy.model import NODE_CHANGING

    actions = [actions] if not isinstance(actions, list) else actions
    if not actions:
        raise ValueError("an approval question needs at least one step")
    first = actions[0]
    incident = None
    try:
        from pitstop.store import records

        incident = records.get_incident(ctx.store, int(incident_id))
    except Exception:  # the form still says what is asked, without the record's extras
        pass
    if evidence is None:
        evidence = list(incident.evidence) if incident is not None else []
    nodes = list(decision.faulty_nodes) or list(getattr(incident, "nodes", None) or [])
    for action in actions:
        if action.target_type == "node" and action.target not in nodes:
            nodes.append(action.target)
    if decision.job_id:
        subject_kind, subject = "job", decision.job_id
    else:
        subject_kind, subject = "node", decision.node or first.target
    steps = []
    for action in actions:
        step_why, _ = _why(action)
        steps.append(PlanStep(seq=action.seq, kind=action.kind.value, target=action.target,
                              summary=_what(action), why=step_why))
    why, blocked = _why(first)
    changed = sorted({a.target for a in decision.actions if a.kind in NODE_CHANGING and a.disposition in {"run", "ask"}})
    radius = BlastRadiusInfo(nodes_changed=changed,
                             detail=first.blocked_why if blocked in _BLOCK_WORDS else "")
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
        key=key or question_key(incident_id, [a.seq for a in actions]), incident_id=incident_id,
        subject_kind=subject_kind, subject=subject,
        cluster=ctx.cluster_name, nodes=nodes, cause=decision.cause.value, signature=decision.signature,
        confidence=decision.confidence, rule=decision.rule, evidence=_evidence_lines(evidence[:MAX_EVIDENCE]),
        evidence_total=len(evidence), steps=steps, done_so_far=list(done_so_far or []),
        action=first.describe(), action_summary=_what(first),
        action_kind=first.kind.value, action_target=first.target, action_seq=first.seq, action_reason=first.reason,
        why=why, blocked_by=blocked, blast_radius=radius, mode=decision.mode, dry_run=decision.dry_run,
        timeout_s=timeout_s, deadline=deadline or now + timedelta(seconds=timeout_s), flow_run_id=run_id,
        flow_run_url=run_url,
    )


# --- pausing and waiting ---------------------------------------------------------------------


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
            description=f"approval asked: {request.title()} (incident {request.incident_id})",
        )
    except Exception:  # cosmetic: the form itself carries the same text
        pass


def run_logger() -> logging.Logger | logging.LoggerAdapter:
    """The flow run's logger (its lines show on the run page), else a plain one."""
    try:
        from prefect import get_run_logger

        return get_run_logger()
    except Exception:  # outside a run (unit tests, the CLI)
        return logging.getLogger("pitstop.approvals")


# Set by `pitstop up` when it stops: every wait in this process returns at once, without an
# answer, and leaves its run Paused (the one process-wide flag, as a signal handler needs one).
_stopping = threading.Event()


def stop_waiting() -> None:
    """Shut down promptly: open questions stay open (journal "awaiting approval", run Paused);
    after the restart the reconciliation re-runs each such incident and it asks again, or
    takes the answer someone gave the old run meanwhile (`answer_given_to`)."""
    _stopping.set()


def answer_given_to(flow_run_id: str | None, key: str) -> ApprovalOutcome | None:
    """The answer an earlier run of this incident received for the same question, if any
    (the same key gives the same run-input keyset)."""
    if not flow_run_id:
        return None
    from uuid import UUID

    from prefect.input import keyset_from_paused_state
    from prefect.states import Paused

    keyset = keyset_from_paused_state(Paused(pause_key=key))
    try:
        outcome = _answer(ApprovalForm, keyset, UUID(str(flow_run_id)))
    except Exception:  # unreadable: ask again rather than guess
        return None
    return None if outcome.answer == "unanswered" else outcome


def wait_for_approval(key: str, timeout_s: int, request: ApprovalRequest | None = None) -> ApprovalOutcome:
    """Pause this flow run until someone answers the form for `key`, Cancels the run, or the
    deadline passes (`request.deadline`, which the notification announced; else `timeout_s`).

    A Prefect server that cannot be reached while waiting is retried until the deadline: the
    question stays open, it is not a denial. When `pitstop up` stops (`stop_waiting`) the wait
    raises Prefect's Pause signal: the run stays Paused, the journal says "awaiting approval".
    """
    from prefect.context import FlowRunContext

    log = run_logger()
    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return ApprovalOutcome(answer="unanswered", comment="not inside a flow run: nobody could be asked")
    if request is not None:
        timeout_s = request.seconds_left()
        publish_artifact(request)
    run_id = context.flow_run.id
    form = approval_form(request, key, timeout_s)
    try:
        keyset, answered, paused = _pause(run_id, form, key, timeout_s)
    except Exception as exc:  # no server, a run that cannot pause: never act without an answer
        return ApprovalOutcome(answer="unanswered", comment=f"could not pause the run to ask "
                               f"({exc.__class__.__name__}: {exc})")
    if answered:  # this run asked the same question before and it was answered
        outcome = _answer(form, keyset, run_id)
    else:
        log.info("Waiting for approval of %s until %s (incident %s): Resume on this run to answer, "
                 "Cancel = deny and stop", request.title() if request else key,
                 request.deadline_text() if request else f"{timeout_s} s from now",
                 request.incident_id if request else "?")
        outcome = _poll(run_id, form, keyset, timeout_s, log, paused)
    _mark_run(run_id, outcome)
    log.log(logging.INFO if outcome.approved else logging.WARNING, "Approval answer for %s: %s",
            request.title() if request else key, outcome.summary)
    return outcome


def _pause(run_id, form: type[ApprovalForm], key: str, timeout_s: int):
    """Propose Paused with the form's keyset and save its schema. (keyset, already answered)."""
    from prefect.client.orchestration import get_client
    from prefect.input import keyset_from_paused_state
    from prefect.input.run_input import run_input_subclass_from_type
    from prefect.states import Paused
    from prefect.utilities.engine import propose_state_sync

    proposed = Paused(timeout_seconds=timeout_s, reschedule=False, pause_key=key)
    keyset = keyset_from_paused_state(proposed)
    proposed.state_details.run_input_keyset = keyset
    with get_client(sync_client=True) as client:
        state = propose_state_sync(client, proposed, flow_run_id=run_id)
        if state.is_running():  # the server refused: this pause key fired before in this run
            return keyset, True, state
        if not state.is_paused():
            raise RuntimeError(f"the server put the run in {state.name}, not Paused")
        run_input_subclass_from_type(form).save(keyset)
    return keyset, False, state


def _poll(run_id, form, keyset, timeout_s: int, log, paused) -> ApprovalOutcome:
    from prefect.client.orchestration import get_client
    from prefect.exceptions import Pause

    poll = min(MAX_POLL_S, max(0.25, timeout_s / 8))
    deadline = time.monotonic() + timeout_s
    outage_since: float | None = None
    with get_client(sync_client=True) as client:
        while True:
            try:
                state = client.read_flow_run(run_id).state
            except Exception as exc:  # httpx errors, a server restarting: the question stays open
                state = None
                if outage_since is None:
                    outage_since = time.monotonic()
                    log.warning("Cannot read this run's state from the Prefect server (%s: %s); the approval "
                                "question stays open, retrying until the deadline", type(exc).__name__, exc)
            else:
                if outage_since is not None:
                    log.info("Prefect server reachable again after %.0f s; still waiting for the answer",
                             time.monotonic() - outage_since)
                    outage_since = None
            if state is not None:
                if state.is_running():
                    return _answer(form, keyset, run_id)
                if state.is_cancelling() or state.is_cancelled():
                    return ApprovalOutcome(answer="cancelled", comment=state.message or "")
                if state.is_final():
                    return ApprovalOutcome(answer="unanswered", comment=f"the run became {state.name} while waiting")
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if _stopping.wait(min(poll, left)):
                log.warning("Pitstop is stopping: the approval question stays open (this run stays Paused); "
                            "after the restart it is picked up again")
                raise Pause(state=paused)
    _leave_paused_state(run_id)
    return ApprovalOutcome(answer="timed_out")


def _answer(form, keyset, run_id) -> ApprovalOutcome:
    from pydantic import ValidationError

    try:
        answer = form.load(keyset, flow_run_id=run_id)
    except ValidationError:
        return ApprovalOutcome(answer="unanswered", comment="resumed without an answer")
    except Exception as exc:  # the answer could not be read: never act on a guess
        return ApprovalOutcome(answer="unanswered", comment=f"the answer could not be read ({type(exc).__name__})")
    return ApprovalOutcome(answer="approved" if answer.decision == "approve" else "denied",
                           comment=" ".join((answer.comment or "").split()), by=answer.approver.strip())


def _mark_run(run_id, outcome: ApprovalOutcome) -> None:
    """A tag per answer (the runs list can be filtered by it)."""
    from prefect.client.orchestration import get_client

    try:
        with get_client(sync_client=True) as client:
            tags = set(client.read_flow_run(run_id).tags or [])
            client.update_flow_run(run_id, tags=sorted(tags | {outcome.tag}))
    except Exception:  # cosmetic: the journal and the end state carry the answer
        pass


def _leave_paused_state(run_id) -> None:
    """After a timeout the server still shows the run as Paused; mark it Running again so the UI
    does not offer a form whose answer nobody will read (the steps are already denied)."""
    from prefect.client.orchestration import get_client
    from prefect.states import Running

    try:
        with get_client(sync_client=True) as client:
            client.set_flow_run_state(run_id, Running(message="approval timed out: denied"), force=True)
    except Exception:  # the UI state is cosmetic; the journal already says "denied"
        pass


def run_end(outcomes: list[ApprovalOutcome], data: Any) -> Any:
    """What a flow returns: `data` as is without questions, else in a state named for the
    strongest answer ("Denied", "Timed out", ...); Cancel ends the run Cancelled."""
    top = strongest(outcomes)
    if top is None:
        return data
    from prefect.states import Cancelled, Completed

    message = f"approval: {top.summary}"
    if top.stops_the_run:
        return Cancelled(message=message, data=data)
    return Completed(name=top.state_name, message=message, data=data)
