"""The blast-radius limit stops an automatic mass drain and asks a human instead.

Demo cluster of 8 nodes in one partition; the policy allows 25 % of a partition out
(storm-guard breakers set wide so this tests the blast radius alone). Three GPUs fall off the
bus one after another: two nodes are drained automatically, the third drain asks for approval,
and with nobody answering (short timeout) it is denied and the node stays in service.
"""

from __future__ import annotations

import pytest

from pitstop.store.tables import ActionRecord, Incident
from tests.flows.conftest import outbox, rows

pytestmark = [pytest.mark.prefect]

WIDE_STORM_GUARD = {
    "window_minutes": 60, "partition_max_drains": 50, "partition_max_percent": 90,
    "cluster_max_drains": 50, "cluster_max_percent": 90, "min_healthy_nodes": 1,
}


def test_third_drain_in_the_partition_asks_instead_of_draining(prefect_server, demo, use_policy, isolated_home, monkeypatch):
    from flows.post_failure import post_failure

    use_policy(blast_radius={"max_partition_percent": 25, "max_nodes_per_hour": 10}, storm_guard=WIDE_STORM_GUARD)
    monkeypatch.setenv("PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S", "2")
    culprits, reports = [], []
    for _ in range(3):
        [fault] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])
        culprits.append(fault.nodes[0])
        reports.append(post_failure(fault.job_id))

    assert len(set(culprits)) == 3
    drained = {a.target for a in demo.actions() if a.op == "drain"}
    assert drained == set(culprits[:2]), demo.actions()
    assert not demo.node(culprits[2]).is_drained

    third = reports[2]
    [drain] = [a for a in rows(ActionRecord) if a.incident_id == third.incident_id and a.kind == "drain"]
    assert drain.state == "denied" and "timeout" in drain.result
    assert "blast radius 25%" in drain.explanation and "3 of 8 nodes" in drain.explanation
    asked = [n for n in outbox(isolated_home) if n["incident"] == third.incident_id and n["subject"].startswith("APPROVAL NEEDED")]
    assert asked and "blast radius" in asked[0]["body"]
    # the job is still requeued away from the suspect node; nothing else touched that node
    touched = [(a.op, a.target) for a in demo.actions() if a.target == culprits[2]]
    assert touched == []
    job = demo.job(third.subject.split()[-1])
    assert job.restart_count == 1 and culprits[2] in job.excluded_nodes
    # one question per refused drain, not one per step that would have followed it
    later = {a.kind: a.state for a in rows(ActionRecord) if a.incident_id == third.incident_id}
    assert later["diag"] == later["resume"] == "skipped" and len(asked) == 1
    assert {i.status for i in rows(Incident)} == {"done"}
