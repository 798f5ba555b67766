"""post_failure end to end on the demo cluster with a real Prefect server."""

from __future__ import annotations

import pytest

from pitstop.config import load_settings
from pitstop.store import Store
from pitstop.store.tables import ActionRecord, Incident
from sqlmodel import select

pytestmark = [pytest.mark.prefect]


def _rows(model):
    store = Store.from_settings(load_settings())
    with store.session() as session:
        return session.exec(select(model)).all()


def test_xid79_job_drains_node_and_requeues_excluding_it(prefect_server, demo):
    from flows.post_failure import post_failure

    [fault] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])
    report = post_failure(fault.job_id)
    assert report.status == "done"
    assert report.verdict.cause.value == "gpu_hardware"
    assert "79" in report.verdict.signature
    culprit = fault.nodes[0]
    node = demo.node(culprit)
    assert node.is_drained and "xid-79" in node.reason and f"incident={report.incident_id}" in node.reason
    ops = [(a.op, a.target) for a in demo.actions()]
    assert ("drain", culprit) in ops and ("requeue", fault.job_id) in ops
    job = demo.job(fault.job_id)
    assert culprit in job.excluded_nodes and job.restart_count == 1
    [incident] = _rows(Incident)
    assert incident.status == "done" and incident.cause == "gpu_hardware"
    states = {(a.kind, a.state) for a in _rows(ActionRecord)}
    assert ("drain", "done") in states and ("requeue", "done") in states

    # The same event again: one remediation only.
    again = post_failure(fault.job_id)
    assert again.status == "duplicate" and again.incident_id == report.incident_id
    assert [(a.op, a.target) for a in demo.actions()] == ops


def test_dry_run_records_and_notifies_would_do_and_changes_nothing(prefect_server, demo, isolated_home, monkeypatch):
    from flows.post_failure import post_failure

    monkeypatch.setenv("PITSTOP_DRY_RUN", "true")
    [fault] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])
    report = post_failure(fault.job_id)
    assert report.status == "done" and demo.actions() == []
    states = {a.kind: a.state for a in _rows(ActionRecord)}
    assert states["drain"] == states["requeue"] == "would_do" and states["notify_ops"] == "done"
    [note] = [n for n in (isolated_home / "outbox").glob("*-ops.json")]
    assert "would do (not executed: dry run)" in note.read_text()


def test_a_job_the_scheduler_forgot_is_still_diagnosed_from_the_event(prefect_server, demo):
    """slurmctld purges finished jobs (MinJobAge); the epilog's facts still make an incident."""
    from flows.post_failure import post_failure

    [fault] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])
    job = demo.job(fault.job_id)
    facts = {"job_id": "4242", "state": "FAILED", "exit_code": 1, "user": "bob", "nodes": job.nodes,
             "stdout": job.stdout_path, "end_time": "2025-01-06T10:00:00+00:00"}
    report = post_failure("4242", facts=facts)  # the demo cluster has no job 4242
    assert report.status == "done" and report.verdict.signature == "xid-79"
    [incident] = _rows(Incident)
    assert incident.job_id == "4242" and incident.end_time is not None
    requeue = [a for a in _rows(ActionRecord) if a.kind == "requeue"]
    assert requeue and requeue[0].state == "failed" and "not in the demo cluster" in requeue[0].result
    assert demo.node(fault.nodes[0]).is_drained


def test_bad_identifiers_are_refused_with_a_clear_message(prefect_server, demo):
    from flows.node_alarm import node_alarm
    from flows.post_failure import post_failure

    with pytest.raises(ValueError, match="not a valid job id"):
        post_failure("12; rm -rf /")
    with pytest.raises(ValueError, match="not a valid node name"):
        node_alarm("gpu01 --all", "xid-79")
    assert _rows(Incident) == []


def test_the_verdict_is_settled_by_the_job_nodes_and_the_mail_says_what_decided_it(prefect_server, demo, isolated_home):
    """An NCCL timeout could be a hung rank, the fabric or a GPU: the flow reads every job node's
    kernel log and node check before it decides, and the notification names what it found."""
    from flows.post_failure import post_failure

    [fault] = demo.inject_faults(1, kinds=["nccl_watchdog"])
    report = post_failure(fault.job_id)
    assert report.status == "done" and report.verdict.cause.value == "nccl_timeout"
    decided = report.verdict.decided_by
    assert decided.startswith("no ") and "hardware Xid" in decided and all(n in decided for n in fault.nodes)
    assert {a.cause.value for a in report.verdict.alternatives} >= {"network_fabric", "gpu_hardware"}
    [note] = list((isolated_home / "outbox").glob("*-ops.json"))
    body = note.read_text()
    assert f"Decided by: {decided}" in body and "Or network_fabric" in body
    [incident] = _rows(Incident)
    from pitstop.policy.decide import Decision

    assert f"decided by: {decided}" in Decision.model_validate(incident.decision).explain()
