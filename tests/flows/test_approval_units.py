"""The pure parts of approvals: answers and their words, the one-question markdown, grouping the
journal's open questions for `pitstop approvals`. No Prefect server needed."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from pitstop.cli.cmd_approvals import pending_questions
from tasks.approval import ApprovalOutcome, ApprovalRequest, PlanStep, question_key, strongest


def test_each_answer_has_its_own_end_words_and_tag():
    answers = {a: ApprovalOutcome(answer=a, comment="c", by="erin") for a in
               ("approved", "denied", "timed_out", "cancelled", "unanswered")}
    assert answers["approved"].summary == "approved by erin: c"
    assert answers["denied"].summary == "denied by erin: c"
    assert answers["timed_out"].summary.startswith("no answer before the approval timeout")
    assert answers["cancelled"].stops_the_run and not answers["denied"].stops_the_run
    names = {a: o.state_name for a, o in answers.items()}
    assert names == {"approved": "Approved", "denied": "Denied", "timed_out": "Timed out", "cancelled": "Cancelled",
                     "unanswered": "Not answered"}
    assert len({o.tag for o in answers.values()}) == 5
    # the journal's note after "denied"/"approved" never repeats the word
    assert answers["cancelled"].note == "cancelled in the Prefect UI (Cancel = deny and stop) (c)"
    assert answers["approved"].note == "c"
    # an incident that was approved once and denied once ends "Denied"
    assert strongest([answers["approved"], answers["denied"]]).answer == "denied"
    assert strongest([answers["approved"], answers["cancelled"], answers["denied"]]).answer == "cancelled"
    assert strongest([]) is None


def _request(steps: list[PlanStep]) -> ApprovalRequest:
    return ApprovalRequest(
        key=question_key(7, [s.seq for s in steps]), incident_id=7, subject_kind="node", subject="gpu03",
        nodes=["gpu03"], cause="gpu_hardware", signature="xid-79", steps=steps, done_so_far=["requeue 99: done"],
        action=steps[0].summary, action_summary=steps[0].summary, action_kind=steps[0].kind,
        action_target=steps[0].target, action_seq=steps[0].seq, mode="act", timeout_s=60,
        deadline=datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc))


def test_one_question_lists_every_step_it_covers():
    steps = [PlanStep(seq=0, kind="drain", target="gpu03", summary='drain gpu03 reason "xid-79"',
                      why=["circuit breaker open: cluster"]),
             PlanStep(seq=1, kind="reboot", target="gpu03", summary="reboot gpu03",
                      why=["the policy asks a human before any reboot"])]
    request = _request(steps)
    text = request.markdown()
    assert text.startswith("### Approve 2 steps?")
    assert "    1. `drain gpu03 reason \"xid-79\"` - circuit breaker open: cluster" in text
    assert "    2. `reboot gpu03` - the policy asks a human before any reboot" in text
    assert "- **Already done:** requeue 99: done" in text
    assert "- **Deadline:** 2030-01-02 03:04:05 UTC (no answer by then = deny)" in text
    assert "Cancel on the run = deny and stop" in text
    assert request.title() == '2 steps: drain gpu03 reason "xid-79", then reboot gpu03'
    assert request.key == "incident-7-actions-0-1" and request.seqs == [0, 1]
    single = _request(steps[1:])
    assert single.markdown().startswith("### Approve `reboot gpu03`?") and single.key == "incident-7-action-1"


def _row(seq, kind, target, state, approval=None):
    return SimpleNamespace(seq=seq, kind=kind, target=target, state=state,
                           params={"approval": approval} if approval else {})


def test_open_questions_are_grouped_per_incident_and_question():
    deadline = (datetime.now(timezone.utc) + timedelta(minutes=30)).isoformat()
    asked = {"key": "incident-3-actions-1-2", "deadline": deadline, "delivered": False, "delivery": "failed: refused",
             "flow_run_id": "run-3", "flow_run_url": "http://ui/runs/flow-run/run-3"}
    incidents = [SimpleNamespace(id=3, kind="node", node="gpu03", job_id=None, nodes=["gpu03"], cause="gpu_hardware",
                                 signature="xid-79"),
                 SimpleNamespace(id=4, kind="job", node=None, job_id="99", nodes=["gpu04"], cause="gpu_hardware",
                                 signature="xid-48")]
    journals = {
        3: [_row(0, "requeue", "99", "done"), _row(1, "drain", "gpu03", "awaiting_approval", asked),
            _row(2, "reboot", "gpu03", "awaiting_approval", asked), _row(3, "diag", "gpu03", "intended")],
        4: [_row(0, "rma_ticket", "gpu04", "awaiting_approval")],  # planned, not asked yet: not listed
    }
    [question] = pending_questions(incidents, journals.__getitem__)
    assert question.incident_id == 3 and question.subject == "node gpu03"
    assert question.steps == ["1 drain gpu03", "2 reboot gpu03"]
    assert question.delivered is False and question.flow_run_id == "run-3"
    assert question.left(datetime.now(timezone.utc)).endswith("s") and "m" in question.left(datetime.now(timezone.utc))
