"""Approvals end to end on the real Prefect server: an RMA verdict pauses the flow run for the
ApprovalForm; another thread answers it with `resume_flow_run`, or nobody does (timeout = deny)."""

from __future__ import annotations

import json
import os
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
    from prefect.flow_runs import resume_flow_run

    def answer() -> None:
        try:
            _, _, run_id = wait_for(lambda: _approval_notice(home, nth), 60, "the approval notification")

            # Paused is set before the form's schema is saved; a resume in between is refused
            wait_for_form(run_id)
            if run_input is not None:
                resume_flow_run(UUID(run_id), run_input=run_input)
        except BaseException as exc:  # surfaced by the test thread
            errors.append(exc)

    thread = threading.Thread(target=answer, name="approver", daemon=True)
    thread.start()
    return thread


def _api_url(setting) -> str:
    """The session server's API: Prefect's settings context does not follow into a thread (the
    approver), the environment the prefect_server fixture set does."""
    return os.environ.get("PREFECT_API_URL") or setting.value()


def paused_form(run_id: str) -> dict | None:
    """What the UI's Resume dialog reads, once the run is Paused and its form is saved: the run
    input keyset from the paused state, then GET /flow_runs/<id>/input/<key> for the schema and
    the description (the markdown shown above the fields)."""
    import httpx
    from prefect.settings import PREFECT_API_URL

    state = _flow_state(run_id)
    keyset = state.state_details.run_input_keyset if state is not None and state.is_paused() else None
    if not keyset:
        return None
    found = {"state": state, "keyset": keyset}
    for name in ("schema", "description"):
        response = httpx.get(f"{_api_url(PREFECT_API_URL)}/flow_runs/{run_id}/input/{keyset[name]}", timeout=10)
        if response.status_code != 200:
            return None
        found[name] = response.json()
    return found


def wait_for_form(run_id: str, timeout: float = 60) -> dict:
    try:
        return wait_for(lambda: paused_form(run_id), timeout, "the flow run to be Paused with its form", interval=0.2)
    except AssertionError as exc:
        state = _flow_state(run_id)
        raise AssertionError(f"{exc}; run {run_id} is {state.name if state else None}: {state!r}") from None


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
    approver = _answer_when_paused(isolated_home, {"decision": "approve", "approver": "oncall", "comment": "vendor case opened by on-call"}, errors)
    report = post_failure(rma_case.job_id)
    approver.join(10)
    assert not errors, errors

    body, url, run_id = _approval_notice(isolated_home)
    assert f"Waiting for approval: rma_ticket {rma_case.nodes[0]}\n" in body
    assert report.flow_run_url == url and run_id in url
    culprit = rma_case.nodes[0]
    acts = _actions_by_kind()
    assert acts["rma_ticket"].state == "done", acts["rma_ticket"].result
    assert "approved by oncall: vendor case opened by on-call" in report.actions[1].detail
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
    state = _flow_state(run_id)
    assert state.is_completed() and state.name == "Approved", state
    assert demo.node(culprit).is_drained  # the drain needs no approval and happened first


def test_deny_opens_no_ticket(rma_case, demo, mailbox, isolated_home, monkeypatch):
    from flows.post_failure import post_failure

    monkeypatch.setenv("PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S", "90")
    errors: list = []
    approver = _answer_when_paused(isolated_home, {"decision": "deny", "approver": "oncall", "comment": "known board, swap on Friday"}, errors)
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
    state = _flow_state(_approval_notice(isolated_home)[2])
    assert state.is_completed() and state.name == "Denied", state


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
    assert state.is_completed() and state.name == "Timed out", state
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
    approver = _answer_when_paused(isolated_home, {"decision": "approve", "approver": "oncall", "comment": "second time lucky"}, errors, nth=1)
    report = post_failure(rma_case.job_id)
    approver.join(10)
    assert not errors, errors
    assert [(a.op, a.target) for a in demo.actions()] == [("drain", rma_case.nodes[0])]
    [ticket] = rows(Ticket)
    assert ticket.incident_id == report.incident_id
    lines = {a.kind: a for a in report.actions}
    assert "earlier run" in lines["drain"].detail and lines["rma_ticket"].state == "done"


def _artifacts(key: str, run_id: str) -> list[dict]:
    """This run's artifacts with `key` (incident ids restart with each test's database)."""
    import httpx
    from prefect.settings import PREFECT_API_URL

    response = httpx.post(f"{_api_url(PREFECT_API_URL)}/artifacts/filter",
                          json={"artifacts": {"key": {"any_": [key]}, "flow_run_id": {"any_": [run_id]}}}, timeout=10)
    response.raise_for_status()
    return response.json()


DEADLINE = re.compile(r"Deadline:\*\* (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC")


def test_the_form_says_what_is_approved_and_needs_a_decision(rma_case, demo, mailbox, isolated_home, prefect_server,
                                                             monkeypatch):
    """What the UI reads for the Resume dialog names the node, cause, evidence, action and
    deadline; the notification links that run and states the same deadline; a resume without a
    decision is refused (the run stays paused); decision=approve runs the action."""
    from datetime import datetime, timezone

    from flows.post_failure import post_failure
    from prefect.client.orchestration import get_client
    from prefect.flow_runs import resume_flow_run

    monkeypatch.setenv("PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S", "120")
    seen: dict = {}
    errors: list = []

    def approver() -> None:
        try:
            body, url, run_id = wait_for(lambda: _approval_notice(isolated_home), 60, "the approval notification")
            seen.update(body=body, url=url, run_id=run_id)
            seen.update(wait_for_form(run_id))
            with get_client(sync_client=True) as client:
                for bad in (None, {}, {"comment": "only a comment"}, {"decision": "maybe", "approver": "alice"},
                            {"decision": "approve"}, {"decision": "approve", "approver": ""}):
                    result = client.resume_flow_run(UUID(run_id), run_input=bad)
                    seen.setdefault("refused", []).append((bad, result.status.value, result.details.reason))
            seen["paused_after_refusals"] = _flow_state(run_id).is_paused()
            resume_flow_run(UUID(run_id), run_input={"decision": "approve", "approver": "alice", "comment": "checked the evidence"})
        except BaseException as exc:  # surfaced by the test thread; deny so the flow ends now
            errors.append(exc)
            if "run_id" in seen:
                try:
                    resume_flow_run(UUID(seen["run_id"]), run_input={"decision": "deny", "approver": "test", "comment": "test failed"})
                except Exception:
                    pass

    thread = threading.Thread(target=approver, name="approver", daemon=True)
    thread.start()
    report = post_failure(rma_case.job_id)
    thread.join(10)
    assert not errors, errors

    from pitstop.store.tables import Incident

    culprit = rma_case.nodes[0]
    [incident] = rows(Incident)
    seq = _actions_by_kind()["rma_ticket"].seq
    text = seen["description"]
    assert isinstance(text, str) and text.startswith("### Approve `rma_ticket "), text
    for needle in (f"`{culprit}`", "`gpu_hardware` (`xid-79`)", f"`rma_ticket {culprit}`", "kind `rma_ticket`",
                   f"target `{culprit}`", "the policy asks a human before any rma_ticket", f"Incident **{incident.id}**",
                   f"job `{rma_case.job_id}`", "mode **act**", "Blast radius:", seen["url"]):
        assert needle in text, f"{needle!r} not in the form's description:\n{text}"
    first = " ".join(incident.evidence[0]["text"].split())[:80]
    assert incident.evidence and first in text, f"evidence {first!r} not in:\n{text}"
    # the deadline on the form is the pause's own expiry, and the notification states it too
    match = DEADLINE.search(text)
    assert match, text
    deadline = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    expiry = seen["state"].state_details.pause_timeout
    assert abs((expiry - deadline).total_seconds()) < 5, (expiry, deadline)
    assert 100 < (deadline - seen["state"].timestamp).total_seconds() <= 121
    assert f"Deadline: {match.group(1)} UTC (no answer by then = deny)" in seen["body"]
    assert seen["url"] == f"{prefect_server.ui_url}/runs/flow-run/{seen['run_id']}"
    assert ("Answer it on the paused run's page (Resume: approve or deny; Cancel: deny and stop): "
            f"{seen['url']}") in seen["body"]
    # the answer is a required choice; the comment is optional
    schema = seen["schema"]
    assert sorted(schema["required"]) == ["approver", "decision"], schema
    assert schema["properties"]["decision"]["enum"] == ["approve", "deny"]
    assert "comment" in schema["properties"]
    assert [status for _, status, _ in seen["refused"]] == ["REJECT"] * 6, seen["refused"]
    reasons = [reason for _, _, reason in seen["refused"]]
    assert all("decision" in r for r in reasons[:4]) and "approver" in reasons[4], reasons
    assert seen["paused_after_refusals"]
    # the same text is a markdown artifact on the run
    [artifact] = _artifacts(f"approval-incident-{incident.id}-action-{seq}-rma-ticket", seen["run_id"])
    assert artifact["type"] == "markdown" and artifact["data"] == text
    assert artifact["flow_run_id"] == seen["run_id"]
    # and the approval took effect
    acts = _actions_by_kind()
    assert acts["rma_ticket"].state == "done", acts["rma_ticket"].result
    [line] = [a for a in report.actions if a.kind == "rma_ticket"]
    assert line.state == "done" and "approved by alice: checked the evidence" in line.detail, line
    [ticket] = rows(Ticket)
    assert ticket.node == culprit
    assert _flow_state(seen["run_id"]).is_completed()


def test_wait_for_approval_without_a_request_still_asks(prefect_server):
    """Callers that pass no ApprovalRequest get the same required choice and a deadline."""
    from prefect import flow
    from prefect.flow_runs import resume_flow_run
    from prefect.runtime import flow_run

    from tasks.approval import wait_for_approval

    ids: list[str] = []
    errors: list = []

    @flow(name="approval-without-request")
    def asks():
        ids.append(str(flow_run.get_id()))
        return wait_for_approval("plain-question", 60)

    def answer() -> None:
        try:
            run_id = wait_for(lambda: ids and ids[0], 30, "the flow run to start")
            form = wait_for_form(run_id)
            assert "Deadline:" in form["description"] and "decision" in form["schema"]["required"]
            resume_flow_run(UUID(run_id), run_input={"decision": "deny", "approver": "tester", "comment": "not today"})
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    outcome = asks()
    thread.join(10)
    assert not errors, errors
    assert not outcome.approved and not outcome.timed_out and outcome.comment == "not today"
    assert outcome.summary == "denied by tester: not today"


def test_request_markdown_is_inert_and_keyed():
    """Evidence text comes from logs: it is fenced, never markdown/HTML; artifact keys are
    lowercase letters, digits and dashes."""
    from datetime import datetime, timezone

    from tasks.approval import ApprovalRequest, EvidenceLine

    request = ApprovalRequest(
        key="incident-7-action-2", incident_id=7, subject="99", nodes=["gpu01"], cause="gpu_hardware",
        signature="xid-79", confidence=0.9, evidence=[EvidenceLine(line=3, text="<script>x</script> ``` *bold*")],
        action="reboot gpu01", action_kind="reboot", action_target="gpu01", why=["**policy** <b>"], mode="act",
        timeout_s=60, deadline=datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
    )
    text = request.markdown()
    assert "````text\nlog:3: <script>x</script> ``` *bold*\n````" in text
    assert "\\*\\*policy\\*\\* \\<b\\>" in text
    assert "- **Deadline:** 2030-01-02 03:04:05 UTC (no answer by then = deny)" in text
    assert request.artifact_key == "approval-incident-7-action-2-reboot"
    assert request.seconds_left(datetime(2030, 1, 2, 3, 3, 5, tzinfo=timezone.utc)) == 60
