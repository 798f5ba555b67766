"""node_alarm and health_sweep, run for real on the demo cluster against the Prefect server."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from uuid import UUID

import pytest

from pitstop.store.tables import ActionRecord, Incident, NodeEvent, NodeRecord
from tests.flows.conftest import outbox, rows, store, wait_for

pytestmark = [pytest.mark.prefect]


def _journal(incident_id: int) -> dict[str, ActionRecord]:
    return {a.kind: a for a in rows(ActionRecord) if a.incident_id == incident_id}


def _steps(incident_id: int) -> list[tuple[str, str]]:
    return [(a.kind, a.state) for a in sorted(rows(ActionRecord), key=lambda a: a.seq) if a.incident_id == incident_id]


def test_node_alarm_on_a_dead_gpu_escalates_within_the_incident_to_an_rma_ticket(prefect_server, demo, isolated_home):
    """Xid 79 (NVIDIA RESTART_BM): drain, reboot, check; the GPU stays dead, so the same incident
    climbs the ladder (DCGM level 3, then the RMA ticket, which asks a human). Nobody answers
    within the test's 2 s: the node stays drained and is handed to ops, never resumed."""
    from flows.node_alarm import node_alarm

    [fault] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])
    node = fault.nodes[0]
    report = node_alarm(node, "xid-79", {"key": "evt-1"})

    assert report.status == "done" and report.verdict.signature == "xid-79"
    assert any("Xid (PCI:" in e.text and e.source == "kernel" for e in report.verdict.evidence)
    info = demo.node(node)
    assert info.is_drained and "xid-79" in info.reason
    assert _steps(report.incident_id) == [
        ("drain", "done"), ("reboot", "done"), ("diag", "done"), ("resume", "skipped"), ("notify_ops", "done"),
        ("diag", "done"), ("resume", "skipped"), ("rma_ticket", "denied"),
    ]
    diags = [a for a in rows(ActionRecord) if a.incident_id == report.incident_id and a.kind == "diag"]
    assert ["-r 1" in d.result and "FAILED" in d.result for d in diags][0] and "-r 3" in diags[1].result
    assert any("escalated within the incident" in line and "rma_ticket" in line for line in report.explain)
    assert f"{node}: stays drained, handed to ops: rma_ticket was denied" in report.explain
    [body] = [n["body"] for n in outbox(isolated_home) if n["incident"] == report.incident_id and "APPROVAL" not in n["subject"]]
    resume_line = next(line for line in body.splitlines() if line.strip().startswith(f"resume {node}"))
    state_word, _, detail = resume_line.partition(" - ")
    assert state_word.strip() == f"resume {node}: not done" and detail.startswith(f"kept {node} drained")
    assert "handed to ops" in body
    [record] = [r for r in rows(NodeRecord) if r.name == node]
    assert record.drain_owner == "pitstop"
    assert [(a.op, a.target) for a in demo.actions()] == [("drain", node), ("reboot", node)]
    # `pitstop nodes` shows the next step of every node Pitstop drained: here, its owner.
    from pitstop.cli.cmd_records import _next_step
    from pitstop.policy import load_policy
    assert _next_step(store(), load_policy(), record).endswith("stays drained, handed to ops: rma_ticket was denied")

    again = node_alarm(node, "xid-79", {"key": "evt-1"})  # the same alarm event delivered twice
    assert again.status == "duplicate" and again.incident_id == report.incident_id
    assert [(a.op, a.target) for a in demo.actions()] == [("drain", node), ("reboot", node)]


def test_node_alarm_on_a_healthy_node_resumes_it_after_diagnostics(prefect_server, demo, monkeypatch):
    from flows.node_alarm import node_alarm

    report = node_alarm("gpu05", "prolog_failed", {"key": "prolog-job-77", "lines": ["xid check: FAIL (stale)"]})

    acts = _journal(report.incident_id)
    assert acts["drain"].state == "done"
    assert acts["reboot"].state == "done"  # gpu05 was drained by this incident: no question needed
    assert acts["diag"].state == "done" and "node check OK" in acts["diag"].result
    assert acts["resume"].state == "done"
    assert not demo.node("gpu05").is_drained
    assert [(a.op, a.target) for a in demo.actions()] == [("drain", "gpu05"), ("reboot", "gpu05"), ("resume", "gpu05")]


def _alarm_events(api_url: str, nodes: set[str]) -> list[dict]:
    from pitstop.events.deliver import PrefectEventsClient

    since = (datetime.now(timezone.utc) - timedelta(minutes=10)).isoformat()
    events = PrefectEventsClient(api_url, timeout_s=5).query(["pitstop.node.alarm"], since)
    return [e for e in events if e["payload"].get("node") in nodes]


def test_health_sweep_batches_stores_alarms_and_flags_repeat_offenders(prefect_server, demo, monkeypatch):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from flows.health_sweep import health_sweep

    monkeypatch.setenv("PITSTOP_PIPELINE__SWEEP_BATCH_SIZE", "3")
    [bad] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])
    culprit = bad.nodes[0]
    demo.drain("gpu08", "hands off: cabling work (ops)")  # a human's drain: not probed

    first = health_sweep()
    assert first.checked == 7 and first.batches == 3
    assert "gpu08" in first.skipped
    assert [r.node for r in first.failing] == [culprit] and first.repeat_offenders == {}
    assert "delivered" in first.alarms[f"{culprit}:xid-79"] or "sent" in first.alarms[f"{culprit}:xid-79"], first.alarms
    with get_client(sync_client=True) as client:
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[UUID(first.flow_run_id)])))
    # one Prefect task per batch of 3, not one per node
    assert sorted(t.name for t in tasks if t.name.startswith("check-")) == ["check-gpu01+2", "check-gpu04+2", "check-gpu07+0"]
    checks = [e for e in rows(NodeEvent) if e.kind == "check"]
    assert len(checks) == 7 and {e.state for e in checks if e.node == culprit} == {"FAIL"}

    events = wait_for(lambda: _alarm_events(prefect_server.api_url, {culprit}), 20, "the node-alarm event on the server")
    # the node's new Xid 79 (counted once in the store) is its alarm, failing checks as evidence
    assert [e["payload"]["alarm"] for e in events] == ["xid-79"]
    assert events[0]["payload"]["details"]["key"]  # node_alarm dedups on it

    health_sweep()
    third = health_sweep()
    assert culprit in third.repeat_offenders and "3 health sweeps" in third.repeat_offenders[culprit]
    [record] = [r for r in rows(NodeRecord) if r.name == culprit]
    assert record.lemon and any("health sweeps" in why for why in record.lemon_reasons)
    assert not rows(Incident)  # the sweep only raises alarms; node_alarm acts
    assert [a.op for a in demo.actions()] == ["drain"]  # only the human's drain above
