"""A leaf switch fails on a 2,048-node cluster: every job on its nodes ends with the fabric fault
(NCCL's IB completion error 12, the NIC's link down) at once. The real post_failure flow runs for
each job, in act mode, against the real Prefect server. Every job gets its incident and is
requeued. The first jobs' nodes are drained as any fabric fault's would be; from the third job on
the leaf (policy `switch_storm.min_incidents`) the failures join one fabric incident for the
switch: nothing more is drained, each requeue keeps off the whole leaf, ops are told once, and
nobody is asked anything. Nothing off the switch is touched. Topology as Slurm's topology.conf has
it (https://slurm.schedmd.com/topology.conf.html).
"""

from __future__ import annotations

import pytest

from pitstop.cluster.demo import DemoCluster
from pitstop.store.tables import ActionRecord, Breaker, Incident
from tests.flows.conftest import rows

pytestmark = [pytest.mark.prefect, pytest.mark.slow]

FLEET = 2048
JOBS = 14  # more jobs than the partition limit lets drains through


@pytest.fixture
def fleet(isolated_home, monkeypatch) -> DemoCluster:
    monkeypatch.setenv("PITSTOP_CLUSTER", "demo")
    monkeypatch.setenv("PITSTOP_MODE", "act")
    monkeypatch.setenv("PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S", "1")  # nobody answers the breaker
    return DemoCluster.create(isolated_home / "demo", nodes=FLEET, seed=5)


def test_a_failed_switch_is_one_fabric_incident_not_a_drain_per_job(prefect_server, fleet, mailbox):
    from flows.post_failure import post_failure
    from pitstop.policy.model import SwitchStormRule

    leaf = fleet.switch_of("gpu0200")
    members = set(fleet.topology()[leaf])
    assert leaf == "leaf07" and len(members) == 32
    assert "SwitchName=leaf07 Nodes=gpu[0193-0224]" in fleet.topology_conf().splitlines()
    failed = fleet.fail_switch(leaf, JOBS, nodes_per_job=1, seed=3)
    culprits = [f.nodes[0] for f in failed]
    assert len(set(culprits)) >= 10  # enough distinct nodes that draining per job would drain > 8

    reports = [post_failure(f.job_id) for f in failed]

    opening = SwitchStormRule().min_incidents  # the job that makes it a storm
    drained = [a.target for a in fleet.actions() if a.op == "drain"]
    assert drained == culprits[:opening - 1], drained  # before the storm is seen: as any fabric fault
    assert {a.target for a in fleet.actions()} - {f.job_id for f in failed} <= members  # nothing off the leaf
    # the drained ones pass their diagnostics and are back in service
    assert sorted(a.target for a in fleet.actions() if a.op == "resume") == sorted(drained)
    assert not any(n.is_drained for n in fleet.nodes())
    assert not [b for b in rows(Breaker) if b.is_open]
    incidents = {i.job_id: i for i in rows(Incident) if i.kind == "job"}
    assert sorted(incidents) == sorted(f.job_id for f in failed)  # one each, none lost
    assert {i.cause for i in incidents.values()} == {"network_fabric"}
    assert all(r.incident_id is not None and r.status == "done" for r in reports)

    # one fabric incident for the switch, which every storm member names
    [switch] = [i for i in rows(Incident) if i.kind == "switch"]
    assert (switch.node, set(switch.nodes), switch.cause) == (leaf, members, "network_fabric")
    later = [incidents[f.job_id] for f in failed[opening - 1:]]
    storms = [i.decision["switch_storm"] for i in later]
    assert {s["fabric_incident_id"] for s in storms} == {switch.id}
    assert [s["opened_here"] for s in storms] == [True] + [False] * (len(later) - 1)
    assert all(incidents[f.job_id].decision["switch_storm"] is None for f in failed[:opening - 1])

    # nobody was asked; ops heard of the storm once (plus the two drains before it)
    actions = rows(ActionRecord)
    assert not [a for a in actions if a.state in {"awaiting_approval", "denied"}]
    told_ops = [a.incident_id for a in actions if a.kind == "notify_ops" and a.state == "done"]
    assert sorted(told_ops) == sorted(incidents[f.job_id].id for f in failed[:opening])
    # every job runs again, off the whole leaf from the storm on
    assert all(fleet.job(f.job_id).restart_count == 1 for f in failed)
    for f in failed[opening - 1:]:
        [requeue] = [a for a in actions if a.incident_id == incidents[f.job_id].id and a.kind == "requeue"]
        assert set(requeue.params["job_changes"]["exclude_nodes"]) >= members, requeue.params
    # ops mail: one per job before the storm, one for the storm (from the job that opened it)
    mailbox.wait(opening)
    assert len(mailbox.messages) == opening, mailbox.subjects()
    assert mailbox.subjects()[-1].endswith(f"SWITCH STORM on {leaf}"), mailbox.subjects()
    storm_mail = mailbox.body(-1)
    assert f"opened fabric incident {switch.id} for switch {leaf}" in storm_mail
    assert "scontrol update NodeName=gpu[0193-0224] State=DRAIN" in storm_mail
