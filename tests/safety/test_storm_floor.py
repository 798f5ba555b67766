"""Storm guard limits on small clusters: percentages need a minimum count of drains, and a breaker
a human reset starts its count afresh. Pure: real policy, real decide(), no I/O."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from pitstop.cluster.base import NodeInfo
from pitstop.config import Mode
from pitstop.models import Cause, Evidence, Verdict
from pitstop.policy import ActionKind, Block, History, ModeState, decide, load_policy
from pitstop.policy.history import DrainRecord, PartitionState
from pitstop.policy.model import StormGuard

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
ACT = ModeState(mode=Mode.ACT)
XID79 = Verdict(cause=Cause.GPU_HARDWARE, signature="xid-79", confidence=0.95,
                evidence=[Evidence(line=0, text="NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus")])


def _policy(**guard):
    base = load_policy()
    return base.model_copy(update={
        "storm_guard": base.storm_guard.model_copy(update=guard),
        # the blast radius asks for approval on its own; keep it out of these storm cases
        "blast_radius": base.blast_radius.model_copy(update={"max_partition_percent": 100, "max_nodes_per_hour": 100}),
    })


def _history(size: int, drained_before: list[str], resets: dict | None = None) -> History:
    healthy = size - len(drained_before)
    return History(
        partitions={"gpu": PartitionState(name="gpu", size=size, healthy=healthy)},
        cluster_size=size, cluster_healthy=healthy,
        recent_drains=[DrainRecord(node=n, at=NOW - timedelta(minutes=5), partitions=["gpu"]) for n in drained_before],
        breaker_resets=resets or {},
    )


def _drain_of(policy, history, node: str, size: int):
    nodes = {f"n{i}": NodeInfo(name=f"n{i}", state="IDLE", partitions=["gpu"]) for i in range(1, size + 1)}
    d = decide(XID79, policy=policy, history=history, mode=ACT, now=NOW, incident_id=7, node=node,
               nodes=nodes, faulty_nodes=[node])
    return d, next(a for a in d.actions if a.kind is ActionKind.DRAIN)


def test_default_policy_has_a_floor_before_percentages_apply():
    assert load_policy().storm_guard.percent_min_drains == 3
    assert StormGuard().percent_min_drains == 3


def test_first_and_second_drain_of_a_4_node_cluster_do_not_trip_the_20_percent_cluster_guard():
    policy = _policy()  # built-in 20 % cluster limit
    for before in ([], ["n1"]):
        d, drain = _drain_of(policy, _history(4, before), "n3", 4)
        assert drain.disposition == "run", drain.describe()
        assert d.breaker_trips == []


def test_third_drain_of_a_4_node_cluster_trips_once_the_floor_is_reached():
    d, drain = _drain_of(_policy(), _history(4, ["n1", "n2"]), "n3", 4)
    assert drain.blocked_by is Block.BREAKER_OPEN and drain.disposition == "ask"
    assert {t.scope for t in d.breaker_trips} >= {"cluster"}


def test_8_node_demo_second_drain_is_fine_third_trips():
    policy = _policy()
    assert _drain_of(policy, _history(8, ["n1"]), "n2", 8)[0].breaker_trips == []
    assert _drain_of(policy, _history(8, ["n1", "n2"]), "n3", 8)[0].breaker_trips != []


def test_acceptance_case_3_of_4_with_50_percent_limit_drains_2_then_opens():
    policy = _policy(partition_max_percent=50, cluster_max_percent=50)
    assert _drain_of(policy, _history(4, []), "n1", 4)[1].disposition == "run"
    assert _drain_of(policy, _history(4, ["n1"]), "n2", 4)[1].disposition == "run"
    d, third = _drain_of(policy, _history(4, ["n1", "n2"]), "n3", 4)
    assert third.blocked_by is Block.BREAKER_OPEN
    assert sorted(t.scope for t in d.breaker_trips) == ["cluster", "partition:gpu"]
    assert "3 of 4 nodes (75%) > limit 50%" in d.breaker_trips[0].reason


def test_a_floor_of_one_restores_plain_percentages():
    d, drain = _drain_of(_policy(percent_min_drains=1), _history(4, []), "n1", 4)
    assert drain.blocked_by is Block.BREAKER_OPEN  # 1 of 4 = 25 % > 20 %
    assert "cluster" in {t.scope for t in d.breaker_trips}


def test_count_limits_apply_below_the_floor():
    d, drain = _drain_of(_policy(cluster_max_drains=1), _history(16, ["n1"]), "n2", 16)
    assert drain.blocked_by is Block.BREAKER_OPEN and "2 drains > limit 1" in d.breaker_trips[0].reason


def test_after_a_human_reset_only_later_drains_count():
    policy = _policy(partition_max_percent=50, cluster_max_percent=50)
    reset = {"cluster": NOW - timedelta(minutes=1), "partition:gpu": NOW - timedelta(minutes=1)}
    d, drain = _drain_of(policy, _history(4, ["n1", "n2"], resets=reset), "n3", 4)
    assert drain.disposition == "run", drain.describe()
    assert d.breaker_trips == []
    # a reset older than the drains changes nothing
    old = {k: NOW - timedelta(hours=2) for k in reset}
    assert _drain_of(policy, _history(4, ["n1", "n2"], resets=old), "n3", 4)[0].breaker_trips != []
