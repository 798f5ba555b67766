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
    def summary(self) -> str:
        if self.timed_out:
            return "no answer before the approval timeout: denied"
        word = "approved" if self.approved else "denied"
        return f"{word}{': ' + self.comment if self.comment else ''}"


def wait_for_approval(key: str, timeout_s: int) -> ApprovalOutcome:
    """Pause until someone answers the form for `key` (unique per incident and action)."""
    try:
        form = pause_flow_run(wait_for_input=ApprovalForm, timeout=timeout_s, key=key, poll_interval=2)
    except Exception as exc:  # FlowPauseTimeout, or resumed without input: both are a deny
        return ApprovalOutcome(approved=False, comment=f"{exc.__class__.__name__}: {exc}", timed_out=True)
    return ApprovalOutcome(approved=bool(form.approve), comment=form.comment or "")
