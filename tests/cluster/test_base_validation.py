"""The shared identifier and JobChanges validation in `pitstop.cluster.base`, and the
requeue-with-changes contract on the demo backend (the same code runs it on Slurm)."""

from __future__ import annotations

import pytest

from pitstop.cluster.base import (
    MAX_TIME_LIMIT_MIN,
    ClusterError,
    InvalidIdentifier,
    InvalidJobChanges,
    JobChanges,
    JobLeftHeld,
    RequeueMode,
    is_resubmission_of,
    resubmit_comment,
    validate_job_changes,
    validate_job_id,
    validate_node_name,
)
from pitstop.cluster.demo import DemoCluster


@pytest.mark.parametrize("name", ["gpu01", "r1n02.cluster", "a_b-c", "x" * 128])
def test_node_names_accepted(name) -> None:
    assert validate_node_name(name) == name


@pytest.mark.parametrize(
    "name", ["gpu01\n", "gpu01\r\n", "\ngpu01", "gpu01,gpu02", "gpu[01-02]", "-gpu", "", "x" * 129, None]
)
def test_node_names_refused(name) -> None:
    with pytest.raises(InvalidIdentifier):
        validate_node_name(name)


@pytest.mark.parametrize("job_id", ["1234", 1234, "12_3", "12+1"])
def test_job_ids_accepted(job_id) -> None:
    assert validate_job_id(job_id) == str(job_id)


@pytest.mark.parametrize("job_id", ["1234\n", "1234 ", "12;3", "12_", "", True, "1" * 13])
def test_job_ids_refused(job_id) -> None:
    with pytest.raises(InvalidIdentifier):
        validate_job_id(job_id)


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        (JobChanges(exclude_nodes=["gpu01\n"]), "exclude_nodes: not a valid node name: 'gpu01\\n'"),
        (JobChanges(exclude_nodes=["gpu[01-02]"]), "not a valid node name"),
        (JobChanges(time_limit_min=MAX_TIME_LIMIT_MIN + 1), "time_limit_min must be whole minutes"),
        (JobChanges.model_construct(exclude_nodes=[], env={}, time_limit_min=0), "not 0"),
        (JobChanges(env={"1X": "a"}), "env: not a valid environment variable name: '1X'"),
        (JobChanges(env={"X": "a,b"}), "env X: the value contains a comma"),
        (JobChanges(env={"X": "it's"}), "a single quote"),
        (JobChanges(env={"X": "a\nb"}), "a newline"),
        (JobChanges(env={"X": "a\x00"}), "a NUL byte"),
    ],
)
def test_job_changes_refused_before_anything_runs(changes, said) -> None:
    with pytest.raises(InvalidJobChanges, match="^job changes refused: ") as caught:
        validate_job_changes(changes)
    assert said in str(caught.value)


def test_job_changes_accepted() -> None:
    ok = JobChanges(exclude_nodes=["gpu01"], time_limit_min=MAX_TIME_LIMIT_MIN,
                    env={"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "=eth0 ib0"})
    assert validate_job_changes(ok) is ok


def test_resubmit_tag_names_the_job_and_incident() -> None:
    tag = resubmit_comment("12", 7)
    assert tag == "pitstop incident=7 resubmit-of=12"
    assert is_resubmission_of(tag, "12", 7) and is_resubmission_of(tag, "12")
    assert is_resubmission_of(tag + " | the user's own comment", "12", 7)
    assert not is_resubmission_of(tag, "12", 8) and not is_resubmission_of(tag, "1")
    assert not is_resubmission_of("pitstop incident=7 resubmit-of=123", "12")
    assert not is_resubmission_of(None, "12")


# ---- the contract on the demo backend ------------------------------------------------------


@pytest.fixture
def cluster(tmp_path) -> DemoCluster:
    return DemoCluster.create(tmp_path / "demo", nodes=4, seed=5)


def _failed_job(cluster: DemoCluster) -> tuple[str, str]:
    [fault] = cluster.inject_faults(1, kinds=["gpu_fell_off_bus"])
    return fault.job_id, fault.nodes[0]


def test_in_place_is_hold_update_release(cluster) -> None:
    job_id, bad = _failed_job(cluster)
    result = cluster.requeue_with_changes(job_id, JobChanges(exclude_nodes=[bad], time_limit_min=90))
    assert result.mode is RequeueMode.IN_PLACE and result.run_job_id == job_id
    assert result.summary == f"requeued job {job_id} (held, ExcNodeList={bad}, TimeLimit=90, released)"
    ops = [(a.op, a.detail) for a in cluster.actions()]
    assert ops == [("requeue", {"hold": True}), ("update_job", {"exclude_nodes": [bad]}),
                   ("update_job", {"time_limit_min": 90}), ("release", {})]
    job = cluster.job(job_id)
    assert (job.state, job.is_held, job.restart_count, job.time_limit_min) == ("PENDING", False, 1, 90)
    assert job.excluded_nodes == [bad]


def test_pending_job_is_held_not_requeued(cluster) -> None:
    job_id, bad = _failed_job(cluster)
    cluster.requeue(job_id)  # e.g. Slurm requeued it itself after a node failure
    with pytest.raises(ClusterError, match="pending"):
        cluster.requeue(job_id)  # as Slurm: a pending job cannot be requeued
    result = cluster.requeue_with_changes(job_id, JobChanges(exclude_nodes=[bad]))
    assert result.steps == ["held while pending", f"ExcNodeList={bad}", "released"]
    assert cluster.job(job_id).restart_count == 1 and not cluster.job(job_id).is_held


def test_failed_update_leaves_the_job_held_and_says_how_to_release_it(cluster) -> None:
    job_id, _ = _failed_job(cluster)
    with pytest.raises(JobLeftHeld) as caught:
        cluster.requeue_with_changes(job_id, JobChanges(exclude_nodes=["gpu99"]))
    message = str(caught.value)
    assert message.startswith(f"job {job_id} is HELD and Pitstop did not release it: setting ExcNodeList=gpu99 failed")
    assert message.endswith(f"release it by hand: scontrol release {job_id}")
    assert caught.value.job_id == job_id
    assert cluster.job(job_id).is_held
    assert "release" not in [a.op for a in cluster.actions()]


def test_someone_elses_hold_is_left_alone(cluster) -> None:
    job_id, bad = _failed_job(cluster)
    cluster.requeue(job_id, hold=True)  # an operator's requeuehold
    with pytest.raises(ClusterError, match="already held .*not by this Pitstop action"):
        cluster.requeue_with_changes(job_id, JobChanges(exclude_nodes=[bad]))
    assert cluster.job(job_id).is_held
    # an interrupted run of the same action held it: finish update + release, no second requeue
    result = cluster.requeue_with_changes(job_id, JobChanges(exclude_nodes=[bad]), resume_held=True)
    assert result.resumed and result.steps[0] == "held by an interrupted run"
    assert cluster.job(job_id).restart_count == 1 and not cluster.job(job_id).is_held


def test_env_change_resubmits_once_with_the_env_recorded(cluster) -> None:
    job_id, bad = _failed_job(cluster)
    changes = JobChanges(exclude_nodes=[bad], env={"NCCL_DEBUG": "INFO"})
    result = cluster.requeue_with_changes(job_id, changes, incident_id=9)
    assert result.mode is RequeueMode.RESUBMITTED and result.run_job_id != job_id
    assert result.summary == f"resubmitted job {job_id} as {result.run_job_id} with NCCL_DEBUG=INFO, excluding {bad}"
    new = cluster.job(result.run_job_id)
    assert new.state == "PENDING" and new.excluded_nodes == [bad]
    assert cluster.job_environment(result.run_job_id) == {"NCCL_DEBUG": "INFO"}
    [logged] = [a for a in cluster.actions() if a.op == "resubmit"]
    assert logged.detail["env"] == {"NCCL_DEBUG": "INFO"}
    assert logged.detail["comment"] == f"pitstop incident=9 resubmit-of={job_id}"

    again = cluster.requeue_with_changes(job_id, changes, incident_id=9)  # a re-run after a crash
    assert again.run_job_id == result.run_job_id and again.resumed
    assert "already resubmitted" in again.summary
    assert [a.op for a in cluster.actions()].count("resubmit") == 1
    assert cluster.find_resubmission(job_id) == result.run_job_id
    assert cluster.find_resubmission(job_id, incident_id=10) is None


def test_env_change_of_a_live_job_is_refused(cluster) -> None:
    job_id, _ = _failed_job(cluster)
    cluster.requeue(job_id)
    with pytest.raises(ClusterError, match="is PENDING: an environment change needs a new submission"):
        cluster.requeue_with_changes(job_id, JobChanges(env={"NCCL_DEBUG": "INFO"}))
    assert "resubmit" not in [a.op for a in cluster.actions()]


def test_env_cannot_be_changed_in_place(cluster) -> None:
    job_id, _ = _failed_job(cluster)
    with pytest.raises(ClusterError, match="in place"):
        cluster.update_job(job_id, JobChanges(env={"NCCL_DEBUG": "INFO"}))


def test_node_placeholder_in_configured_commands() -> None:
    from pitstop.cluster.base import for_node

    assert for_node(["cat", "/shared/kern/{node}.log", "{x}"], "gpu03") == ["cat", "/shared/kern/gpu03.log", "{x}"]

