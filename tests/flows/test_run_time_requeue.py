"""A rule narrowed by run time, end to end on the real dev cluster: the run time is Slurm's own
(StartTime/EndTime as the flow re-reads them), not a number the test passes in.

The policy is the built-in one with the software-bug run-time rule's threshold cut from 60 min to
6 s, so a job can cross it in a test: a crash after 8 s of running is requeued once (and the
requeued run finishes), a crash at once is only reported to its owner.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import pytest

from pitstop.store.tables import ActionRecord, Incident
from tests.cluster.conftest import dev_cluster_env, slurm_cluster, sshd  # noqa: F401  (session fixtures)
from tests.flows.conftest import act_on_dev_cluster, rows

pytestmark = [pytest.mark.cluster, pytest.mark.prefect, pytest.mark.slow]

CRASH = """echo "step 1200 loss 2.31"
echo 'Traceback (most recent call last):' >&2
echo '  File "/work/train.py", line 41, in step' >&2
echo '    mask = batch["attention_mask"]' >&2
echo "KeyError: 'attention_mask'" >&2
exit 1
"""
LATE_CRASH = ('#!/bin/sh\nif [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then echo "resumed from checkpoint"; exit 0; fi\n'
              "sleep 8\n" + CRASH)
EARLY_CRASH = "#!/bin/sh\n" + CRASH
SIX_SECONDS = {"cause": "software_bug", "ran_at_least_minutes": 0.1, "max_same_failures": 1,
               "description": "test: a crash after 6 s of running", "actions": ["requeue", "notify_user"]}


def _field(slurm, job_id: str, field: str) -> str:
    out = slurm.slurm("scontrol", "-o", "show", "job", job_id)
    match = re.search(rf"(?:^|\s){field}=(\S*)", out.strip())
    return match.group(1) if match else ""


@pytest.fixture
def cluster_env(slurm_cluster, sshd, use_policy, monkeypatch):  # noqa: F811
    use_policy(first_rules=[SIX_SECONDS])
    act_on_dev_cluster(monkeypatch, slurm_cluster, sshd)
    monkeypatch.setenv("PITSTOP_PIPELINE__KERNEL_LOG_ARGV", json.dumps(["dmesg"]))
    return slurm_cluster


def _fail(slurm, name: str, script: str) -> tuple[str, dict]:
    job_id = slurm.submit("-J", name, "-N1", "-o", "runtime-%j.out", script=script)
    slurm.wait_state(job_id, "FAILED", timeout_s=90)
    end = _field(slurm, job_id, "EndTime")
    return job_id, {"job_id": job_id, "state": "FAILED", "exit_code": 1,
                    "end_time": datetime.fromisoformat(end).replace(tzinfo=timezone.utc).isoformat()}


def test_a_crash_after_the_threshold_is_requeued_and_finishes(prefect_server, cluster_env):
    from flows.post_failure import post_failure

    slurm = cluster_env
    job_id, facts = _fail(slurm, "pitstop-runtime-late", LATE_CRASH)
    try:
        report = post_failure(job_id, facts=facts)
        assert report.status == "done", report
        assert report.verdict.cause.value == "software_bug"
        [incident] = rows(Incident)
        assert incident.decision["rule"] == "software_bug:* (ran >= 0.1 min)"
        assert incident.decision["job_ran_minutes"] >= 8 / 60
        assert {a.kind: a.state for a in rows(ActionRecord)}["requeue"] == "done"
        assert _field(slurm, job_id, "Restarts") == "1"
        slurm.wait_state(job_id, "COMPLETED", timeout_s=120)  # the requeued run finished
    finally:
        slurm.cancel(job_id)


def test_a_crash_at_start_up_is_only_reported(prefect_server, cluster_env):
    from flows.post_failure import post_failure

    slurm = cluster_env
    job_id, facts = _fail(slurm, "pitstop-runtime-early", EARLY_CRASH)
    try:
        report = post_failure(job_id, facts=facts)
        assert report.status == "done", report
        [incident] = rows(Incident)
        assert incident.decision["rule"] == "software_bug:*", incident.decision
        assert "requeue" not in {a.kind for a in rows(ActionRecord)}
        assert _field(slurm, job_id, "Restarts") == "0" and _field(slurm, job_id, "JobState") == "FAILED"
    finally:
        slurm.cancel(job_id)
