"""Slurm hook environments (recorded on Slurm 22.05) -> JobEnded, and the stable event ids."""

from __future__ import annotations

import pytest

from pitstop.events.hook_env import (
    HookEnvError,
    decode_wait_status,
    derive_state,
    job_ended_from_env,
    prolog_facts,
)
from pitstop.events.models import JOB_ENDED
from tests.triggers.conftest import read_env_fixture


def test_failed_job_from_real_epilog_slurmctld_env() -> None:
    job = job_ended_from_env(read_env_fixture("epilog_ctld_exit3.env"), cluster="fallback")
    assert (job.job_id, job.state, job.exit_code, job.signal) == ("8", "FAILED", 3, 0)
    assert job.cluster == "devcluster"  # SLURM_CLUSTER_NAME wins over the configured default
    assert job.nodes == ["gpu01"] and job.user == "root" and job.partition == "gpu"
    assert job.stdout == "/tmp/g-rec/fail-%j.out"  # unexpanded, as Slurm gives it
    assert job.hook == "EpilogSlurmctld" and job.is_failure
    wire = job.to_wire()
    assert wire.event == JOB_ENDED
    assert wire.resource["pitstop.job.outcome"] == "failure"
    assert wire.resource["prefect.resource.id"] == "pitstop.job.devcluster.8"
    assert wire.payload["job_id"] == "8" and wire.payload["exit_code"] == 3


def test_signal_and_success_and_slurmd_epilog() -> None:
    seg = job_ended_from_env(read_env_fixture("epilog_ctld_sigsegv.env"), "c")
    assert (seg.state, seg.exit_code, seg.signal) == ("SIGNALED", 0, 11)
    ok = job_ended_from_env(read_env_fixture("epilog_ctld_success_2nodes.env"), "c")
    assert ok.state == "COMPLETED" and not ok.is_failure and ok.nodes == ["gpu01", "gpu02"]
    assert ok.to_wire().resource["pitstop.job.outcome"] == "success"
    slurmd = job_ended_from_env(read_env_fixture("epilog_slurmd_exit3.env"), "c")
    assert slurmd.hook == "Epilog" and (slurmd.exit_code, slurmd.state) == (3, "FAILED")


@pytest.mark.parametrize(
    ("status", "expected"), [(768, (3, 0)), (0, (0, 0)), (9, (0, 9)), (139, (0, 11)), (None, (None, None))]
)
def test_decode_wait_status(status, expected) -> None:
    assert decode_wait_status(status) == expected


def test_raw_status_used_when_exit_code2_missing_or_garbage() -> None:
    env = {"SLURM_JOB_ID": "5", "SLURM_JOB_EXIT_CODE": "256", "SLURM_JOB_EXIT_CODE2": "x:y"}
    job = job_ended_from_env(env, "c")
    assert (job.exit_code, job.state) == (1, "FAILED")


def test_no_exit_information_is_unknown_and_treated_as_failure() -> None:
    job = job_ended_from_env({"SLURM_JOB_ID": "5"}, "c")
    assert job.state == "UNKNOWN" and job.is_failure
    assert derive_state(None, None) == "UNKNOWN"


def test_missing_job_id_says_what_to_do() -> None:
    with pytest.raises(HookEnvError, match="SLURM_JOB_ID is not set"):
        job_ended_from_env({"SLURM_JOB_EXIT_CODE": "768"}, "c")


def test_odd_values_degrade_gracefully() -> None:
    env = {
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_EXIT_CODE2": "1:0",
        "SLURM_JOB_NODELIST": "gpu[01-",  # broken hostlist: keep it raw, nodes unknown
        "SLURM_JOB_NAME": "caf\udce9-" + "x" * 10_000,  # undecodable byte, huge value
        "SLURM_JOB_RESTART_COUNT": "not-a-number",
    }
    job = job_ended_from_env(env, "c")
    assert job.nodes == [] and job.nodelist == "gpu[01-"
    assert job.job_name is not None and len(job.job_name) <= 4096 and "\ufffd" in job.job_name
    assert job.restart_count == 0
    job.to_wire().model_dump_json()  # serialisable: no lone surrogates left


def test_event_id_is_stable_and_separates_restarts() -> None:
    env = read_env_fixture("epilog_ctld_exit3.env")
    first, again = job_ended_from_env(env, "c"), job_ended_from_env(env, "c")
    again = again.model_copy(update={"seen_at": first.seen_at.replace(second=59)})
    assert first.event_id == again.event_id  # a re-run hook for the same end: same id
    from datetime import timedelta

    reused = first.model_copy(update={"seen_at": first.seen_at + timedelta(hours=2)})
    assert reused.event_id != first.event_id  # the same job id ending hours later is another job
    requeued = job_ended_from_env({**env, "SLURM_JOB_RESTART_COUNT": "1"}, "c")
    assert requeued.event_id != first.event_id
    other_cluster = job_ended_from_env({**env, "SLURM_CLUSTER_NAME": "other"}, "c")
    assert other_cluster.event_id != first.event_id


def test_prolog_facts_from_real_prolog_env() -> None:
    facts = prolog_facts(read_env_fixture("prolog_slurmd.env"))
    assert facts == {
        "node": "gpu01", "job_id": "8", "user": "root", "cluster": "devcluster", "restart_count": 0
    }


@pytest.mark.parametrize(
    ("env_fixture", "scontrol_fixture", "state"),
    [
        ("epilog_ctld_timeout.env", "scontrol_during_epilog_timeout.txt", "TIMEOUT"),
        ("epilog_ctld_scancel.env", "scontrol_during_epilog_scancel.txt", "SIGNALED"),
    ],
)
def test_zero_exit_corrected_by_scontrol(env_fixture, scontrol_fixture, state) -> None:
    """Recorded: TIMEOUT and scancel both look like 0:0 in EpilogSlurmctld."""
    from pitstop.events.hook_env import refine_from_scontrol
    from tests.triggers.conftest import TRIGGER_FIXTURES

    job = job_ended_from_env(read_env_fixture(env_fixture), "c")
    assert job.state == "COMPLETED"  # what the environment alone says
    refined = refine_from_scontrol(job, (TRIGGER_FIXTURES / scontrol_fixture).read_text())
    assert refined.state == state and refined.is_failure
    assert refined.to_wire().resource["pitstop.job.outcome"] == "failure"


def test_scontrol_garbage_leaves_the_job_alone() -> None:
    from pitstop.events.hook_env import refine_from_scontrol

    job = job_ended_from_env(read_env_fixture("epilog_ctld_success_2nodes.env"), "c")
    assert refine_from_scontrol(job, "slurm_load_jobs error: Invalid job id specified") == job
    assert refine_from_scontrol(job, "") == job
