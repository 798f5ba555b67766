"""A leaf switch fails on a 2,048-node cluster: every job on its nodes ends with the fabric fault
(NCCL's IB completion error 12, the NIC's link down) at once. The real post_failure flow runs for
each job, in act mode, against the real Prefect server. Every job gets its incident and is
requeued; the automatic drains stop at the blast radius (4 an hour), long before half the switch,
let alone half the fleet; nothing off the switch is touched. Known gap (see the README): each
later incident asks a human on its own; the storm is not yet grouped into one fabric incident. Topology as Slurm's topology.conf has it (https://slurm.schedmd.com/topology.conf.html).
"""

from __future__ import annotations

import pytest

from pitstop.cluster.demo import DemoCluster
from pitstop.policy.model import BlastRadius, StormGuard
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


def test_a_failed_switch_opens_one_breaker_instead_of_draining_its_nodes(prefect_server, fleet):
    from flows.post_failure import post_failure

    leaf = fleet.switch_of("gpu0200")
    members = set(fleet.topology()[leaf])
    assert leaf == "leaf07" and len(members) == 32
    assert "SwitchName=leaf07 Nodes=gpu[0193-0224]" in fleet.topology_conf().splitlines()
    failed = fleet.fail_switch(leaf, JOBS, nodes_per_job=1, seed=3)
    culprits = [f.nodes[0] for f in failed]
    assert len(set(culprits)) >= 10  # enough distinct nodes that an unguarded run drains > 8

    reports = [post_failure(f.job_id) for f in failed]

    # The first limit a switch storm reaches at this size is the blast radius (drains per hour):
    # the partition's storm-guard count (8) and percentages (of 2,048) come later.
    limit = BlastRadius().max_nodes_per_hour
    assert limit < StormGuard().partition_max_drains
    drained = [a.target for a in fleet.actions() if a.op == "drain"]
    assert len(drained) == len(set(drained)) == limit, drained
    assert set(drained) <= members  # nothing off the failed switch is touched
    assert {a.target for a in fleet.actions()} - {f.job_id for f in failed} <= members
    # the switch's nodes themselves pass their diagnostics: the drained ones are back in service
    assert sorted(a.target for a in fleet.actions() if a.op == "resume") == sorted(drained)
    assert not any(n.is_drained for n in fleet.nodes())
    assert not [b for b in rows(Breaker) if b.is_open]
    incidents = [i for i in rows(Incident) if i.kind == "job"]
    assert sorted(i.job_id for i in incidents) == sorted(f.job_id for f in failed)  # one each, none lost
    assert {i.cause for i in incidents} == {"network_fabric"}
    assert all(r.incident_id is not None for r in reports)
    # every later incident asked a human about its own drain and was refused (nobody answered);
    # its job was still requeued away from the suspect node
    held_back = {a.incident_id for a in rows(ActionRecord) if a.kind == "drain" and a.state == "denied"}
    assert len(held_back) == JOBS - limit
    assert all("blast radius" in a.explanation for a in rows(ActionRecord) if a.kind == "drain" and a.state == "denied")
    assert all(fleet.job(f.job_id).restart_count == 1 for f in failed)
