"""A leaf switch's storm: many jobs failing on its nodes at once are one fabric fault, not N
faulty nodes (Llama 3, Table 5: network switch/cable 8.4 % of interruptions). Pure: no store, no
scheduler."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from importlib import resources

from pitstop.cluster.base import JobRecord, NodeInfo
from pitstop.config import Mode
from pitstop.models import Cause, Evidence, Verdict
from pitstop.policy import ActionKind, History, ModeState, decide, load_policy
from pitstop.policy.history import PartitionState, PastIncident
from pitstop.policy.model import SwitchStormRule, parse_policy
from pitstop.policy.switch_storm import find_switch_storm

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
ACT = ModeState(mode=Mode.ACT)
POLICY = load_policy()
LEAVES = {"leaf01": [f"gpu{i:02d}" for i in range(1, 9)], "leaf02": [f"gpu{i:02d}" for i in range(9, 17)]}
FABRIC = Verdict(cause=Cause.NETWORK_FABRIC, signature="ib-port-down", confidence=0.9,
                 evidence=[Evidence(line=4, text="mlx5_core 0000:1a:00.0: Port module event: module 0, Cable unplugged")])


def failed(job_id: str, nodes: list[str], minutes_ago: float, cause=Cause.NETWORK_FABRIC, signature="ib-port-down",
           incident: int | None = None) -> PastIncident:
    return PastIncident(id=incident or int(job_id), at=NOW - timedelta(minutes=minutes_ago), cause=cause,
                        signature=signature, job_id=job_id, nodes=nodes)


def history(recent: list[PastIncident], leaves=LEAVES) -> History:
    nodes = sorted(n for members in leaves.values() for n in members)
    return History(partitions={"gpu": PartitionState(name="gpu", size=len(nodes), healthy=len(nodes))},
                   cluster_size=len(nodes), switches=leaves, cluster_recent=recent)


def job(job_id: str, nodes: list[str]) -> JobRecord:
    return JobRecord(job_id=job_id, user="alice", partition="gpu", state="FAILED", nodes=nodes, time_limit_min=600)


def plan(recent, nodes=("gpu03", "gpu04"), faulty=("gpu03",), verdict=FABRIC, policy=POLICY, job_id="200"):
    return decide(verdict, policy=policy, history=history(recent), mode=ACT, now=NOW, incident_id=50,
                  job=job(job_id, list(nodes)), faulty_nodes=list(faulty),
                  nodes={n: NodeInfo(name=n, state="IDLE", partitions=["gpu"]) for n in nodes})


def test_the_third_job_on_one_leaf_is_a_storm_and_drains_nothing() -> None:
    recent = [failed("101", ["gpu01", "gpu02"], 5), failed("102", ["gpu05", "gpu06"], 2)]
    d = plan(recent)
    assert d.switch_storm is not None and d.switch_storm.switch == "leaf01"
    assert d.switch_storm.jobs == ["101", "102"]
    kinds = [a.kind for a in d.actions]
    assert ActionKind.DRAIN not in kinds and ActionKind.RESUME not in kinds and ActionKind.DIAG not in kinds
    [requeue] = [a for a in d.actions if a.kind is ActionKind.REQUEUE]
    assert set(requeue.job_changes.exclude_nodes) == set(LEAVES["leaf01"])  # off the whole leaf
    assert d.faulty_nodes == []
    assert any("leaf switch leaf01" in n and "gpu[01-08]" in n for n in d.notes), d.notes
    assert any("scontrol update NodeName=gpu[01-08] State=DRAIN" in n for n in d.notes)


def test_two_jobs_are_not_yet_a_storm_the_node_is_drained_as_before() -> None:
    d = plan([failed("101", ["gpu01", "gpu02"], 5)])
    assert d.switch_storm is None
    assert [a.target for a in d.actions if a.kind is ActionKind.DRAIN] == ["gpu03"]


def test_failures_on_other_leaves_outside_the_window_or_of_other_causes_do_not_count() -> None:
    recent = [
        failed("101", ["gpu09", "gpu10"], 1),                      # leaf02
        failed("102", ["gpu01"], 31),                              # leaf01, but 31 min ago (window 30)
        failed("103", ["gpu02"], 1, cause=Cause.CUDA_OOM, signature="cuda-oom"),  # the job's own problem
        failed("104", ["gpu05"], 1, incident=7),
        failed("104", ["gpu06"], 0.5, incident=8),                 # the same job twice counts once
    ]
    assert plan(recent).switch_storm is None


def test_incidents_not_classified_yet_count() -> None:
    """In a burst most of the leaf's incidents are still being classified when this one decides."""
    recent = [failed("101", ["gpu01"], 0.2, cause=Cause.UNKNOWN, signature="pending"),
              failed("102", ["gpu07"], 0.1, cause=Cause.UNKNOWN, signature="pending")]
    assert plan(recent).switch_storm is not None
    unknown = [failed("101", ["gpu01"], 0.2, cause=Cause.UNKNOWN, signature="unknown"),
               failed("102", ["gpu07"], 0.1, cause=Cause.UNKNOWN, signature="unknown")]
    assert plan(unknown).switch_storm is None  # classified, and not a fabric fault


def test_a_job_spanning_two_leaves_joins_the_one_that_is_failing() -> None:
    recent = [failed("101", ["gpu09"], 3), failed("102", ["gpu10", "gpu11"], 2), failed("103", ["gpu01"], 1)]
    storm = find_switch_storm(SwitchStormRule(), LEAVES, recent, Cause.NCCL_TIMEOUT, ["gpu08", "gpu09"], "200", NOW)
    assert storm is not None and storm.switch == "leaf02" and storm.jobs == ["101", "102"]


def test_other_causes_never_storm_and_no_topology_means_no_storm() -> None:
    recent = [failed("101", ["gpu01"], 3), failed("102", ["gpu02"], 2)]
    assert find_switch_storm(SwitchStormRule(), LEAVES, recent, Cause.GPU_HARDWARE, ["gpu03"], "200", NOW) is None
    assert find_switch_storm(SwitchStormRule(), {}, recent, Cause.NETWORK_FABRIC, ["gpu03"], "200", NOW) is None


def test_the_policy_file_sets_the_threshold() -> None:
    shipped = resources.files("pitstop.policy").joinpath("default_policy.yaml").read_text(encoding="utf-8")
    text = shipped.replace("  min_incidents: 3\n", "  min_incidents: 4\n")
    assert text != shipped
    stricter = parse_policy(text)
    recent = [failed("101", ["gpu01", "gpu02"], 5), failed("102", ["gpu05", "gpu06"], 2)]
    assert plan(recent, policy=stricter).switch_storm is None
    assert plan(recent + [failed("103", ["gpu07"], 1)], policy=stricter).switch_storm is not None
