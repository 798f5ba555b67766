"""Approvals in the Prefect UI: pause the flow run with a small form; no answer in time = deny.

Called from the flow body (Prefect pauses flow runs, not task runs).
"""

from __future__ import annotations

from prefect.flow_runs import pause_flow_run
from prefect.input import RunInput
from pydantic import BaseModel, Field


class ApprovalForm(RunInput):
    """Shown in the Prefect UI when a risky action waits for a human."""

    approve: bool = Field(default=False, description="approve this action")
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


def wait_for_approval(key: str, timeout_s: int) -> ApprovalOutcome:
    """Pause until someone answers the form for `key` (unique per incident and action)."""
    from prefect.exceptions import FlowPauseTimeout

    # Prefect polls at most every poll_interval; short test timeouts need a short poll.
    poll = max(1, min(5, timeout_s // 4 or 1))
    try:
        form = pause_flow_run(wait_for_input=ApprovalForm, timeout=timeout_s, key=key, poll_interval=poll)
    except FlowPauseTimeout:
        _leave_paused_state()
        return ApprovalOutcome(approved=False, timed_out=True)
    except Exception as exc:  # cannot pause (no server, resumed without input...): never act
        return ApprovalOutcome(approved=False, comment=f"could not wait for approval ({exc.__class__.__name__}: {exc})")
    if form is None:
        return ApprovalOutcome(approved=False, comment="resumed without an answer")
    return ApprovalOutcome(approved=bool(form.approve), comment=form.comment or "")


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
