"""Approvals end to end on the real Prefect server: an RMA verdict pauses the flow run for the
ApprovalForm; another thread answers it with `resume_flow_run`, or nobody does (timeout = deny)."""

from __future__ import annotations

import json
import re
import threading
from uuid import UUID

import pytest

from pitstop.store.tables import ActionRecord, Ticket
from tests.flows.conftest import outbox, rows, wait_for

pytestmark = [pytest.mark.prefect]

RMA_RULE = {
    "cause": "gpu_hardware",
    "signature": "xid-79",
    "description": "test: Xid 79 goes straight to the vendor",
    "actions": ["drain", "rma_ticket", "notify_ops"],
}
FLOW_RUN_URL = re.compile(r"^Flow run: (\S+/runs/flow-run/([0-9a-f-]{36}))$", re.M)


def _approval_notice(home, nth: int = 0) -> tuple[str, str, str]:
    """(body, flow run URL, flow run id) of the nth 'approval needed' notification, once sent."""
    notes = [n for n in outbox(home) if n["subject"].startswith("APPROVAL NEEDED")]
    if len(notes) <= nth:
        return None
    match = FLOW_RUN_URL.search(notes[nth]["body"])
    assert match, f"approval notice has no flow-run link:\n{notes[nth]['body']}"
    return notes[nth]["body"], match.group(1), match.group(2)


def _answer_when_paused(home, run_input: dict | None, errors: list, nth: int = 0) -> threading.Thread:
    """From another thread: wait for the notice, check the run is Paused, resume it with input."""
    from prefect.client.orchestration import get_client
    from prefect.flow_runs import resume_flow_run

    def answer() -> None:
        try:
            _, _, run_id = wait_for(lambda: _approval_notice(home, nth), 60, "the approval notification")

            def paused():
                with get_client(sync_client=True) as client:
                    state = client.read_flow_run(UUID(run_id)).state
                return state is not None and state.is_paused()

            wait_for(paused, 30, "the flow run to be Paused", interval=0.2)
            if run_input is not None:
                resume_flow_run(UUID(run_id), run_input=run_input)
        except BaseException as exc:  # surfaced by the test thread
            errors.append(exc)

    thread = threading.Thread(target=answer, name="approver", daemon=True)
    thread.start()
    return thread


def _flow_state(run_id: str):
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(UUID(run_id)).state


@pytest.fixture
def rma_case(prefect_server, demo, use_policy, mailbox, monkeypatch):
    use_policy([RMA_RULE])
    [fault] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])
    return fault


def _actions_by_kind() -> dict[str, ActionRecord]:
    return {a.kind: a for a in rows(ActionRecord)}


def test_approve_creates_and_sends_the_rma_ticket(rma_case, demo, mailbox, webhook, isolated_home, monkeypatch):
    from flows.post_failure import post_failure

    monkeypatch.setenv("PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S", "90")
    monkeypatch.setenv("PITSTOP_PIPELINE__TICKET_URLS", json.dumps([webhook.url]))
    errors: list = []
    approver = _answer_when_paused(isolated_home, {"approve": True, "comment": "vendor case opened by on-call"}, errors)
    report = post_failure(rma_case.job_id)
    approver.join(10)
    assert not errors, errors

    body, url, run_id = _approval_notice(isolated_home)
    assert "Waiting for approval: awaiting approval: rma_ticket" in body
    assert report.flow_run_url == url and run_id in url
    culprit = rma_case.nodes[0]
    acts = _actions_by_kind()
    assert acts["rma_ticket"].state == "done", acts["rma_ticket"].result
    assert "approved: vendor case opened by on-call" in report.actions[1].detail
    [ticket] = rows(Ticket)
    assert ticket.node == culprit and ticket.incident_id == report.incident_id
    assert ticket.status == "sent" and ticket.xid_history and ticket.xid_history[0]["xid"] == 79
    assert ticket.pci_bus and ticket.gpu_uuid and ticket.gpu_uuid.startswith("GPU-")
    # the ticket went to the JSON webhook sink; the approval notice and the incident mail to ops
    [post] = webhook.posts
    assert post["path"] == "/rma" and post["json"]["title"].startswith(f"[pitstop RMA] {culprit}")
    record = json.loads(post["json"]["message"].split("Ticket record (JSON):", 1)[1])
    assert record["ticket_id"] == ticket.id and record["xid_history"][0]["xid"] == 79
    subjects = wait_for(lambda: len(mailbox.messages) >= 2 and mailbox.subjects(), 20, "two mails")
    assert any(s.startswith("APPROVAL NEEDED") for s in subjects)
    assert any(s.startswith("[pitstop demo] job") for s in subjects)
    assert _flow_state(run_id).is_completed()
    assert demo.node(culprit).is_drained  # the drain needs no approval and happened first


def test_deny_opens_no_ticket(rma_case, demo, mailbox, isolated_home, monkeypatch):
    from flows.post_failure import post_failure

    monkeypatch.setenv("PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S", "90")
    errors: list = []
    approver = _answer_when_paused(isolated_home, {"approve": False, "comment": "known board, swap on Friday"}, errors)
    report = post_failure(rma_case.job_id)
    approver.join(10)
    assert not errors, errors
    acts = _actions_by_kind()
    assert acts["rma_ticket"].state == "denied"
    assert "known board, swap on Friday" in acts["rma_ticket"].result
    assert rows(Ticket) == []
    assert not any(s.startswith("[pitstop RMA]") for s in mailbox.subjects())
    assert acts["drain"].state == "done" and acts["notify_ops"].state == "done"
    assert report.status == "done"


def test_timeout_is_a_deny_and_the_run_does_not_stay_paused(rma_case, demo, isolated_home, monkeypatch):
    from flows.post_failure import post_failure

    monkeypatch.setenv("PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S", "2")
    report = post_failure(rma_case.job_id)
    acts = _actions_by_kind()
    assert acts["rma_ticket"].state == "denied"
    assert "timeout" in acts["rma_ticket"].result
    assert rows(Ticket) == []
    _, _, run_id = _approval_notice(isolated_home)
    state = _flow_state(run_id)
    assert state.is_completed(), state
    assert any(a.kind == "rma_ticket" and a.state == "denied" for a in report.actions)


def test_a_run_killed_while_waiting_asks_again_and_acts_once(rma_case, demo, mailbox, isolated_home, monkeypatch):
    """SIGKILL the flow while it is paused for approval; the re-run asks again (the question was
    never answered), does not redo the drain, and one approval opens exactly one ticket."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from flows.post_failure import post_failure
    from pitstop.store.tables import Incident

    monkeypatch.setenv("PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S", "120")
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; from flows.post_failure import post_failure; post_failure(sys.argv[1])",
         rma_case.job_id], cwd=Path(__file__).resolve().parents[2], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: [i for i in rows(Incident) if i.status == "awaiting_approval"], 90, "the child to pause")
        wait_for(lambda: _approval_notice(isolated_home, 0), 10, "the child's approval notice")
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(10)
    errors: list = []
    approver = _answer_when_paused(isolated_home, {"approve": True, "comment": "second time lucky"}, errors, nth=1)
    report = post_failure(rma_case.job_id)
    approver.join(10)
    assert not errors, errors
    assert [(a.op, a.target) for a in demo.actions()] == [("drain", rma_case.nodes[0])]
    [ticket] = rows(Ticket)
    assert ticket.incident_id == report.incident_id
    lines = {a.kind: a for a in report.actions}
    assert "earlier run" in lines["drain"].detail and lines["rma_ticket"].state == "done"
