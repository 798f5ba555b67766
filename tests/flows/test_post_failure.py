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
