"""The requeue executor and its crash checks (`intent_params` -> killed -> `already_applied` ->
re-run) on the demo cluster, one interruption point at a time. test_crash_rerun kills a real
flow process at the worst of these moments; here every moment is set up directly."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pitstop.cluster.base import ClusterError, JobChanges
from pitstop.cluster.demo import DemoCluster
from pitstop.policy.decide import PlannedAction
from pitstop.policy.model import ActionKind
from tasks.act import EXECUTORS, already_applied, intent_params

INCIDENT = 41


@pytest.fixture
def cluster(tmp_path) -> DemoCluster:
    return DemoCluster.create(tmp_path / "demo", nodes=4, seed=7)


def _setup(cluster: DemoCluster, **changes):
    [fault] = cluster.inject_faults(1, kinds=["gpu_fell_off_bus"])
    bad = fault.nodes[0]
    action = PlannedAction(seq=2, kind=ActionKind.REQUEUE, target=fault.job_id, target_type="job",
                           job_changes=JobChanges(exclude_nodes=[bad], **changes))
    return SimpleNamespace(scheduler=cluster), action, bad


def _rerun(ctx, action, intent):
    """What remediate does with an action left "running": ask the cluster, else redo in doubt."""
    facts = {"incident_id": INCIDENT, "in_doubt": {action.seq: intent}}
    return EXECUTORS[ActionKind.REQUEUE](ctx, action, facts)


def _ops(cluster: DemoCluster, op: str) -> int:
    return [a.op for a in cluster.actions()].count(op)


def test_uninterrupted_requeue_then_confirmed(cluster) -> None:
    ctx, action, bad = _setup(cluster, time_limit_min=60)
    intent = intent_params(ctx, action)
    assert (intent["restart_count_before"], intent["held_before"], intent["state_before"]) == (0, False, "FAILED")
    assert already_applied(ctx, action, intent) is False  # nothing happened yet: run it

    result = EXECUTORS[ActionKind.REQUEUE](ctx, action, {"incident_id": INCIDENT})

    assert result.ok and result.summary == (
        f"requeued job {action.target} (held, ExcNodeList={bad}, TimeLimit=60, released)")
    assert result.details["run_job_id"] == action.target and result.details["mode"] == "in_place"
    assert already_applied(ctx, action, intent) is True


@pytest.mark.parametrize("updated", [False, True], ids=["after-requeuehold", "after-update"])
def test_killed_while_held_is_finished_not_requeued_again(cluster, updated) -> None:
    ctx, action, bad = _setup(cluster)
    intent = intent_params(ctx, action)
    cluster.requeue(action.target, hold=True)  # the killed run got this far
    if updated:
        cluster.update_job(action.target, JobChanges(exclude_nodes=[bad]))
    assert already_applied(ctx, action, intent) is False  # held: not done, even with the update in

    result = _rerun(ctx, action, intent)

    assert result.summary == f"requeued job {action.target} (held by an interrupted run, ExcNodeList={bad}, released)"
    job = cluster.job(action.target)
    assert job.restart_count == 1 and not job.is_held and job.excluded_nodes == [bad]
    assert _ops(cluster, "requeue") == 1 and _ops(cluster, "release") == 1
    assert already_applied(ctx, action, intent) is True


def test_pending_job_killed_after_hold_is_finished(cluster) -> None:
    ctx, action, bad = _setup(cluster)
    cluster.requeue(action.target)  # Slurm requeued it itself (node failure) before Pitstop acted
    intent = intent_params(ctx, action)
    assert intent["state_before"] == "PENDING" and intent["held_before"] is False
    cluster.hold(action.target)  # the killed run got this far

    assert already_applied(ctx, action, intent) is False
    result = _rerun(ctx, action, intent)

    assert result.details["steps"][0] == "held by an interrupted run"
    assert cluster.job(action.target).restart_count == 1 and _ops(cluster, "requeue") == 1
    assert already_applied(ctx, action, intent) is True


def test_a_hold_that_was_there_before_is_not_released(cluster) -> None:
    ctx, action, _ = _setup(cluster)
    cluster.requeue(action.target)
    cluster.hold(action.target)  # an operator holds the job before Pitstop gets to it
    intent = intent_params(ctx, action)
    assert intent["held_before"] is True
    with pytest.raises(ClusterError, match="already held"):
        EXECUTORS[ActionKind.REQUEUE](ctx, action, {"incident_id": INCIDENT})
    assert already_applied(ctx, action, intent) is False
    with pytest.raises(ClusterError, match="already held"):  # and a re-run does not take it either
        _rerun(ctx, action, intent)
    assert cluster.job(action.target).is_held and _ops(cluster, "release") == 0


def test_intent_from_an_older_pitstop_never_releases_a_pending_hold(cluster) -> None:
    ctx, action, _ = _setup(cluster)
    cluster.requeue(action.target)
    old_intent = {"restart_count_before": cluster.job(action.target).restart_count}  # no held_before
    cluster.hold(action.target)
    with pytest.raises(ClusterError, match="already held"):
        _rerun(ctx, action, old_intent)


def test_env_change_killed_after_resubmission_is_not_submitted_twice(cluster) -> None:
    ctx, action, bad = _setup(cluster, env={"NCCL_DEBUG": "INFO"})
    intent = intent_params(ctx, action)
    assert already_applied(ctx, action, intent) is False  # not submitted yet: run it

    first = EXECUTORS[ActionKind.REQUEUE](ctx, action, {"incident_id": INCIDENT})
    new_id = first.details["run_job_id"]
    assert first.summary == f"resubmitted job {action.target} as {new_id} with NCCL_DEBUG=INFO, excluding {bad}"
    assert cluster.job_environment(new_id) == {"NCCL_DEBUG": "INFO"}

    # killed before the journal heard back: the cluster shows it, and a re-run finds it
    assert already_applied(ctx, action, intent) is True
    again = _rerun(ctx, action, intent)
    assert again.details["run_job_id"] == new_id
    assert again.summary.startswith(f"job {action.target} was already resubmitted as {new_id}")
    assert _ops(cluster, "resubmit") == 1


def test_invalid_changes_fail_the_action_before_touching_the_job(cluster) -> None:
    from tasks.act import ACT_TASKS  # the Prefect task: a scheduler refusal becomes a failed result

    ctx, action, _ = _setup(cluster, env={"NCCL_SOCKET_IFNAME": "eth0,eth1"})
    result = ACT_TASKS[ActionKind.REQUEUE].fn(ctx, action, {"incident_id": INCIDENT})
    assert not result.ok and "job changes refused: env NCCL_SOCKET_IFNAME" in result.summary
    assert [a.op for a in cluster.actions()] == []
