"""One question per consent-needing plan, Cancel = deny and stop, distinct ends, a question
that could not be delivered, and `pitstop approvals` answering from a terminal.

Real flows on the demo cluster against the session's Prefect server; answers go through the
same API the UI uses (resume with the form's input; Cancel = set the run Cancelling, which is
what the UI's Cancel button does: POST /flow_runs/<id>/set_state {"type": "CANCELLING"}).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from uuid import UUID

import pytest

from pitstop.store.tables import ActionRecord, Incident, Ticket
from tests.flows.conftest import outbox, rows, wait_for
from tests.flows.test_approval import RMA_RULE, _approval_notice, wait_for_form
from tests.support.net import free_port

pytestmark = [pytest.mark.prefect]

REPO = Path(__file__).resolve().parents[2]

# A dead GPU (NVIDIA Xid 79, "GPU has fallen off the bus"): drain, reboot, check, resume; the
# check fails on the demo cluster, so the ladder climbs to the RMA ticket in the same incident.
# Every step but resume asks here, diag included: the diag must still never be asked about.
ASK_EVERYTHING = {"approval_required": ["drain", "reboot", "diag", "rma_ticket"],
                  "reboot_drained_without_approval": False}


def _notices(home) -> list[dict]:
    return [n for n in outbox(home) if n["subject"].startswith("APPROVAL NEEDED")]


def _steps(incident_id: int) -> list[tuple[str, str, str]]:
    return [(a.kind, a.state, a.result or "") for a in sorted(rows(ActionRecord), key=lambda a: a.seq)
            if a.incident_id == incident_id]


def _answer(home, nth: int, run_input: dict | None, errors: list, cancel: bool = False) -> threading.Thread:
    """Answer the nth question from another thread, as the UI would."""
    from prefect.client.orchestration import get_client
    from prefect.flow_runs import resume_flow_run
    from prefect.states import Cancelling

    def answer() -> None:
        try:
            _, _, run_id = wait_for(lambda: _approval_notice(home, nth), 90, f"approval notice {nth}")
            wait_for_form(run_id)
            if cancel:
                with get_client(sync_client=True) as client:
                    client.set_flow_run_state(UUID(run_id), Cancelling(message="cancelled by the test"))
                errors.append(("cancelled_at", time.monotonic()))
            else:
                resume_flow_run(UUID(run_id), run_input=run_input)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return thread


def test_one_question_per_plan_round_never_for_a_read_only_step(prefect_server, demo, use_policy, mailbox,
                                                                isolated_home, monkeypatch):
    from flows.node_alarm import node_alarm

    monkeypatch.setenv("PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S", "90")
    use_policy(**ASK_EVERYTHING)
    [fault] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])
    node = fault.nodes[0]
    errors: list = []
    first = _answer(isolated_home, 0, {"decision": "approve", "approver": "alice", "comment": "take it out"}, errors)
    second = _answer(isolated_home, 1, {"decision": "deny", "approver": "bob", "comment": "swap it Friday"}, errors)
    state = node_alarm(node, "xid-79", {"key": "evt-plan"}, return_state=True)
    first.join(10), second.join(10)
    assert not errors, errors
    report = state.result()

    notices = _notices(isolated_home)
    assert len(notices) == 2, [n["subject"] for n in notices]  # the plan, then the new rung
    plan_q, rung_q = notices[0]["body"], notices[1]["body"]
    assert f"Waiting for approval: 2 steps: drain {node}" in plan_q and f", then reboot {node}" in plan_q, plan_q
    assert f"Waiting for approval: rma_ticket {node}\n" in rung_q, rung_q
    assert not any("Waiting for approval: diag" in n["body"] or ", then diag" in n["body"] for n in notices)
    # the second question says what already happened instead of "Actions: none"
    assert "Done so far:" in rung_q and f"reboot {node}: done" in rung_q, rung_q
    steps = _steps(report.incident_id)
    by_kind: dict[str, list] = {}
    for kind, st, result in steps:
        by_kind.setdefault(kind, []).append((st, result))
    assert by_kind["drain"][0][0] == "done" and by_kind["drain"][0][1].startswith("approved by alice: take it out")
    assert by_kind["reboot"][0][0] == "done" and by_kind["reboot"][0][1].startswith("approved by alice: take it out")
    assert [st for st, _ in by_kind["diag"]] == ["done", "done"]  # both rungs' checks, never asked about
    assert all("diag is read-only: no consent needed" in res for _, res in by_kind["diag"]), by_kind["diag"]
    assert by_kind["rma_ticket"] == [("denied", "denied by bob: swap it Friday")]
    assert [(a.op, a.target) for a in demo.actions()] == [("drain", node), ("reboot", node)]
    assert rows(Ticket) == []
    # the run's end names the strongest "no" of its answers, and carries a tag per answer
    assert state.is_completed() and state.name == "Denied", state
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        tags = set(client.read_flow_run(state.state_details.flow_run_id).tags)
    assert {"approval:approved", "approval:denied"} <= tags, tags
    # and the explain view shows who answered and why
    out = _cli("incidents", "--explain").stdout
    assert "approved by alice: take it out" in out and "denied by bob: swap it Friday" in out, out


def test_cancel_is_deny_and_stop_at_once(prefect_server, demo, use_policy, mailbox, isolated_home, monkeypatch):
    from flows.node_alarm import node_alarm

    monkeypatch.setenv("PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S", "120")
    use_policy(**ASK_EVERYTHING)
    [fault] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])
    node = fault.nodes[0]
    events: list = []
    thread = _answer(isolated_home, 0, None, events, cancel=True)
    state = node_alarm(node, "xid-79", {"key": "evt-cancel"}, return_state=True)
    ended = time.monotonic()
    thread.join(10)
    errors = [e for e in events if not isinstance(e, tuple)]
    assert not errors, errors
    [(_, cancelled_at)] = events
    assert ended - cancelled_at < 15, f"the run took {ended - cancelled_at:.1f} s to stop after Cancel"
    assert state.is_cancelled(), state
    [incident] = rows(Incident)
    steps = {(kind, st) for kind, st, _ in _steps(incident.id)}
    assert ("drain", "denied") in steps and ("reboot", "denied") in steps, steps
    assert not any(st in {"done", "running", "intended", "awaiting_approval"} for kind, st in steps
                   if kind not in {"notify_ops"}), steps
    assert demo.actions() == []  # nothing was changed on the cluster
    assert len(_notices(isolated_home)) == 1  # no escalation, no second question
    assert incident.status == "done"
    [drain] = [a for a in rows(ActionRecord) if a.kind == "drain"]
    assert "cancelled" in drain.result, drain.result


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pitstop.cli.entry", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "250", **(env or {})})


def test_undelivered_question_is_retried_said_and_answerable_from_the_terminal(
        prefect_server, demo, use_policy, isolated_home, monkeypatch):
    """The SMTP server is down: the question is sent three times, the log and `pitstop
    incidents` say it was not delivered, `pitstop approvals` lists it, and `pitstop approvals
    approve` resumes the run with the same journal entries as the UI."""
    from flows.post_failure import post_failure

    dead = f"mailto://127.0.0.1:{free_port()}?from=pitstop@localhost&to=ops@localhost"
    monkeypatch.setenv("PITSTOP_NOTIFY__URLS", json.dumps([dead]))
    monkeypatch.setenv("PITSTOP_NOTIFY__TIMEOUT_S", "3")
    monkeypatch.setenv("PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S", "120")
    use_policy([RMA_RULE])
    [fault] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])
    seen: dict = {}
    errors: list = []

    def operator() -> None:
        try:
            wait_for(lambda: len(_notices(isolated_home)) >= 3 and _approval_notice(isolated_home, 2), 90,
                     "three tries of the approval question")
            _, _, run_id = _approval_notice(isolated_home, 0)
            wait_for_form(run_id)

            def listed():
                out = _cli("approvals").stdout
                return out if "NOT DELIVERED" in out else None

            seen["list"] = wait_for(listed, 60, "`pitstop approvals` to say NOT DELIVERED", interval=1)
            seen["incidents"] = _cli("incidents").stdout
            seen["approve"] = _cli("approvals", "approve", "1", "--comment", "seen in the UI", "--by", "carol")
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=operator, daemon=True)
    thread.start()
    report = post_failure(fault.job_id)
    thread.join(10)
    assert not errors, errors
    assert seen["approve"].returncode == 0, seen["approve"].stderr
    assert "approved by carol" in seen["approve"].stdout
    assert f"rma_ticket {fault.nodes[0]}" in seen["list"] and "1" in seen["list"], seen["list"]
    assert "question NOT delivered" in seen["incidents"], seen["incidents"]
    [line] = [a for a in report.actions if a.kind == "rma_ticket"]
    assert line.state == "done" and line.detail.startswith("approved by carol: seen in the UI"), line
    [record] = [a for a in rows(ActionRecord) if a.kind == "rma_ticket"]
    assert record.params["approval"]["delivered"] is False, record.params["approval"]
    assert _cli("approvals").stdout.strip().startswith("Nothing waits for approval")


def test_a_second_alarm_for_the_node_joins_the_waiting_incident_and_asks_nothing(
        prefect_server, demo, use_policy, mailbox, isolated_home, monkeypatch):
    """An hourly sweep that finds Xid 79 and then Xid 45 on the same node raises two alarms with
    different keys: the second joins the incident that already waits for approval."""
    from flows.node_alarm import node_alarm

    monkeypatch.setenv("PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S", "90")
    use_policy(approval_required=["drain"])
    [fault] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])
    node = fault.nodes[0]
    seen: dict = {}
    errors: list = []

    def second_alarm_then_deny() -> None:
        try:
            _, _, run_id = wait_for(lambda: _approval_notice(isolated_home, 0), 90, "the first question")
            wait_for_form(run_id)
            seen["second"] = node_alarm(node, "xid-45", {"key": "evt-sweep-2"})
            from prefect.flow_runs import resume_flow_run

            resume_flow_run(UUID(run_id), run_input={"decision": "deny", "approver": "dave", "comment": "later"})
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=second_alarm_then_deny, daemon=True)
    thread.start()
    first = node_alarm(node, "xid-79", {"key": "evt-sweep-1"})
    thread.join(10)
    assert not errors, errors
    assert seen["second"].status == "busy" and seen["second"].incident_id == first.incident_id, seen["second"]
    assert len(rows(Incident)) == 1
    assert len(_notices(isolated_home)) == 1
    assert demo.actions() == []
