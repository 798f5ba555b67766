"""Every Xid in NVIDIA's catalog gets its resolution bucket's default plan from the one table in
the default policy (`xid_buckets`), unless a rule names that Xid (Xid 64, a failed row remap).

Source of the buckets: NVIDIA's Xid Catalog ("immediate action" column),
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, carried in pitstop/node/xid.py.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from classifiers.xid_rules import CAUSE_OF
from pitstop.cluster.base import JobRecord, NodeInfo
from pitstop.config import Mode
from pitstop.models import Verdict
from pitstop.node.xid import XID_CATALOG
from pitstop.policy import ActionKind, load_policy
from pitstop.policy.decide import decide
from pitstop.policy.history import History, PartitionState
from pitstop.policy.model import KNOWN_BUCKETS
from pitstop.policy.safety import ModeState

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
POLICY = load_policy()
NODES = {"gpu01": NodeInfo(name="gpu01", state="IDLE", partitions=["gpu"])}
HISTORY = History(partitions={"gpu": PartitionState(name="gpu", size=16, healthy=16)}, cluster_size=16)
K = ActionKind

# What a first node alarm of each bucket does to the node (the node's steps, in order).
EXPECTED_NODE_STEPS: dict[str, list[ActionKind]] = {
    "RESTART_APP": [],  # damped: the node is touched only when it recurs (3 in 60 min)
    "RESET_GPU": [K.DRAIN, K.GPU_RESET, K.DIAG, K.RESUME],
    "WORKFLOW_NVLINK_ERR": [K.DRAIN, K.GPU_RESET, K.DIAG, K.RESUME],
    "WORKFLOW_NVLINK5_ERR": [K.DRAIN, K.GPU_RESET, K.DIAG, K.RESUME],
    "RESTART_BM": [K.DRAIN, K.REBOOT, K.DIAG, K.RESUME],
    "RESTART_VM": [K.DRAIN, K.REBOOT, K.DIAG, K.RESUME],
    # NVIDIA's memory error management: a reset activates the pending row remap; level 3 proves it
    "WORKFLOW_XID_48": [K.DRAIN, K.GPU_RESET, K.DIAG, K.RESUME],
    "CONTACT_SUPPORT": [K.DRAIN, K.DIAG, K.RESUME],
    "CHECK_MECHANICALS": [K.DRAIN],  # then a person: handed to ops
    "IGNORE": [],
    "WORKFLOW_XID_45": [],
    "XID_154": [],
}
# Xids whose default is a rule of their own rather than their bucket's plan.
RULE_EXCEPTIONS = {64: [K.DRAIN, K.DIAG, K.RESUME]}  # a failed row remap: level 3, then RMA


def test_every_catalog_bucket_has_a_plan_and_an_expectation() -> None:
    assert set(POLICY.xid_buckets) == KNOWN_BUCKETS == set(EXPECTED_NODE_STEPS)


@pytest.mark.parametrize("xid", sorted(XID_CATALOG), ids=lambda x: f"xid-{x}")
def test_catalog_walk_node_alarm(xid: int) -> None:
    bucket = XID_CATALOG[xid].immediate
    v = Verdict(cause=CAUSE_OF[XID_CATALOG[xid].implicates], signature=f"xid-{xid}", confidence=0.95)
    d = decide(v, policy=POLICY, history=HISTORY, mode=ModeState(mode=Mode.ACT), now=NOW, incident_id=1,
               node="gpu01", nodes=NODES)
    node_steps = [a.kind for a in d.actions if a.target_type == "node"]
    if xid in RULE_EXCEPTIONS:
        assert node_steps == RULE_EXCEPTIONS[xid] and "NVIDIA" not in d.rule
        return
    assert d.rule.endswith(f"(NVIDIA {bucket})"), d.rule
    assert node_steps == EXPECTED_NODE_STEPS[bucket], (xid, bucket, d.explain())
    diag = next((a for a in d.actions if a.kind is K.DIAG), None)
    if bucket in {"WORKFLOW_XID_48", "CONTACT_SUPPORT"}:
        assert diag.diag_level == 3
    if K.RESUME in node_steps:
        assert next(a for a in d.actions if a.kind is K.RESUME).after_diag_passes


@pytest.mark.parametrize("xid", [94, 95, 79, 48, 63], ids=lambda x: f"xid-{x}")
def test_job_with_an_xid_is_requeued_excluding_the_node_only_when_the_node_is_acted_on(xid: int) -> None:
    job = JobRecord(job_id="1003", user="alice", partition="gpu", state="FAILED", nodes=["gpu01"], time_limit_min=60)
    v = Verdict(cause=CAUSE_OF[XID_CATALOG[xid].implicates], signature=f"xid-{xid}", confidence=0.95)
    d = decide(v, policy=POLICY, history=HISTORY, mode=ModeState(mode=Mode.ACT), now=NOW, incident_id=1,
               job=job, nodes=NODES)
    requeue = next((a for a in d.actions if a.kind is K.REQUEUE), None)
    drained = any(a.kind is K.DRAIN for a in d.actions)
    if XID_CATALOG[xid].immediate == "IGNORE":
        assert requeue is None and not drained  # record only: the user is told
        return
    assert requeue is not None
    assert requeue.job_changes.exclude_nodes == (["gpu01"] if drained else [])
    # Xid 95 is uncontained (RESET_GPU): never requeue onto the GPU NVIDIA says must be reset.
    assert drained == (xid != 94)
