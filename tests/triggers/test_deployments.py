"""Deployments and automations: `pitstop up` serves them; a failed-job event starts post_failure.

End to end with real processes: the session's Prefect server, `pitstop up` serving the real
deployments, `pitstop epilog` emitting the event, the real post_failure flow remediating a job
on the demo cluster.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pitstop.cluster.demo import DemoCluster
from pitstop.config import Settings
from pitstop.events.deliver import PrefectEventsClient, flush
from pitstop.events.spool import Spool
from pitstop.processes import stop_process_group
from tests.triggers.conftest import PITSTOP_BIN, PrefectRest

NO_SWEEP_CRON = "0 0 1 1 *"  # keep the scheduled sweep out of the way of this test


def test_routes_become_triggers_and_a_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    from deployments.serve import build_deployments

    settings = Settings(triggers={"health_sweep_cron": "*/30 * * * *"})
    by_name = {d.name: d for d in build_deployments(settings)}
    assert set(by_name) == {"post-failure", "node-alarm", "health-sweep"}
    [failed] = by_name["post-failure"].triggers
    assert failed.expect == {"pitstop.job.ended"}
    assert failed.match.model_dump()["pitstop.job.outcome"] == "failure"  # only non-success ends
    assert failed.parameters == {
        "job_id": "{{ event.payload.job_id }}",
        "cluster": "{{ event.payload.cluster }}",
        "facts": "{{ event.payload }}",
    }
    [alarm] = by_name["node-alarm"].triggers
    assert alarm.expect == {"pitstop.node.alarm"} and alarm.parameters["node"] == "{{ event.payload.node }}"
    [schedule] = by_name["health-sweep"].schedules
    assert schedule.schedule.cron == "*/30 * * * *"
    interval = build_deployments(Settings(triggers={"health_sweep_interval_s": 900}))[-1]
    assert interval.schedules[0].schedule.interval.total_seconds() == 900


@pytest.fixture
def served(warm_prefect, isolated_home: Path) -> Iterator[dict]:
    """`pitstop up` against the session's server (so it only serves), stopped by SIGTERM."""
    env = {
        **os.environ,
        "PITSTOP_HOME": str(isolated_home),
        "PITSTOP_CLUSTER": "demo",
        "PITSTOP_MODE": "act",
        # a demo Xid 79 GPU stays dead after its reboot: the incident climbs to the RMA ticket,
        # which asks a human; nobody answers here, so the run ends (denied) instead of waiting
        "PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S": "2",
        "PREFECT_API_URL": warm_prefect.api_url,
        "PITSTOP_TRIGGERS__HEALTH_SWEEP_CRON": NO_SWEEP_CRON,
        "PITSTOP_TRIGGERS__RUNNER_POLL_S": "1",
        "PITSTOP_TRIGGERS__FLUSH_INTERVAL_S": "1",
        # the automation path alone: a reconciler here would also answer other tests' events on
        # the shared server (tests/triggers/test_reconcile_prefect.py covers reconciliation)
        "PITSTOP_TRIGGERS__RECONCILE_INTERVAL_S": "0",
    }
    log_path = isolated_home.parent / "pitstop-up.log"
    PrefectRest(warm_prefect.api_url).cancel_leftover_runs()  # another test's event is not ours to run
    with log_path.open("wb") as log:
        proc = subprocess.Popen([str(PITSTOP_BIN), "up"], env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    rest = PrefectRest(warm_prefect.api_url)
    deadline = time.monotonic() + 90
    deployment = None
    while time.monotonic() < deadline and proc.poll() is None:
        deployment = rest.deployment("post-failure", "post-failure")
        serving = b"ready: " in log_path.read_bytes()  # this `pitstop up`, not an earlier one
        if serving and deployment and any(
            a["name"].startswith("pitstop: pitstop.job.ended") for a in rest.automations()
        ):
            break
        time.sleep(1)
    assert deployment, f"pitstop up did not register its deployments:\n{log_path.read_text()[-3000:]}"
    try:
        time.sleep(1)  # the automation service picks up a new automation within a moment
        yield {"env": env, "rest": rest, "deployment": deployment, "log": log_path, "proc": proc,
               "since": time.time() - 1}
    finally:
        stop_process_group(proc, grace_s=30)


def _wait_for_runs(rest: PrefectRest, deployment_id: str, job_id: str, timeout_s: float,
                   state: str | None = None, since: float = 0.0) -> list[dict]:
    """Runs for `job_id` created after `since` (epoch s): demo job ids repeat across tests."""
    from datetime import datetime

    deadline = time.monotonic() + timeout_s
    while True:
        runs = [r for r in rest.flow_runs(deployment_id)
                if str(r["parameters"].get("job_id")) == job_id
                and datetime.fromisoformat(r["created"].replace("Z", "+00:00")).timestamp() >= since]
        if runs and (state is None or all(r["state_type"] == state for r in runs)):
            return runs
        if time.monotonic() > deadline:
            return runs
        time.sleep(1)


@pytest.mark.prefect
@pytest.mark.slow
def test_failed_job_event_starts_post_failure_once(served: dict, isolated_home: Path) -> None:
    demo = DemoCluster.create(isolated_home / "demo", nodes=8, seed=3)
    [fault] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])
    job = demo.job(fault.job_id)
    hook_env = {  # what EpilogSlurmctld would pass for this job
        "PITSTOP_HOME": str(isolated_home), "PREFECT_API_URL": served["env"]["PREFECT_API_URL"],
        "SLURM_JOB_ID": job.job_id, "SLURM_CLUSTER_NAME": "demo", "SLURM_JOB_USER": "alice",
        "SLURM_JOB_EXIT_CODE2": f"{job.exit_code or 0}:{job.signal or 0}",
        "SLURM_JOB_NODELIST": ",".join(job.nodes), "SLURM_JOB_PARTITION": "gpu",
    }
    if hook_env["SLURM_JOB_EXIT_CODE2"] == "0:0":
        hook_env["SLURM_JOB_EXIT_CODE2"] = "1:0"
    proc = subprocess.run([str(PITSTOP_BIN), "epilog"], env=hook_env, capture_output=True, timeout=30)
    assert proc.returncode == 0

    rest, deployment = served["rest"], served["deployment"]
    runs = _wait_for_runs(rest, deployment["id"], job.job_id, timeout_s=60, since=served["since"])
    assert len(runs) == 1, f"no post_failure run for job {job.job_id}:\n{served['log'].read_text()[-3000:]}"
    run = runs[0]
    assert run["parameters"]["cluster"] == "demo"
    assert run["parameters"]["facts"]["exit_code"] == int(hook_env["SLURM_JOB_EXIT_CODE2"].split(":")[0])

    done = _wait_for_runs(rest, deployment["id"], job.job_id, timeout_s=120, state="COMPLETED",
                          since=served["since"])
    assert done and done[0]["state_type"] == "COMPLETED", (
        f"post_failure ended {done[0]['state_type'] if done else '?'}:\n{served['log'].read_text()[-4000:]}"
    )
    assert done[0]["name"] == f"post-failure-job-{job.job_id}"  # named by the flow when it runs
    # started in `pitstop up`'s process by the fast lane, not in a freshly spawned interpreter
    assert f"fast lane: started flow run {run['id']}" in served["log"].read_text()
    assert any(a.op == "drain" and a.target == fault.nodes[0] for a in demo.actions())

    # the same event delivered again (a lost reply, a re-run epilog): no second remediation
    spool = Spool(isolated_home / "spool")
    [sent] = list(spool.sent.glob("*.json"))
    spool.write(spool.read(sent))
    client = PrefectEventsClient(served["env"]["PREFECT_API_URL"], 5.0)
    report = flush(spool, client, keep_sent=10)
    # `pitstop up`'s own deliverer may hold the spool at that moment and send it itself: either
    # way the duplicate leaves the spool (under load CI saw skipped_locked once).
    deadline = time.monotonic() + 30
    while report.skipped_locked and time.monotonic() < deadline:
        time.sleep(0.5)
        report = flush(spool, client, keep_sent=10)
    assert not report.skipped_locked and report.pending == report.quarantined == 0 and not report.errors, report
    time.sleep(8)  # trigger evaluation and the runner's poll, several times over
    assert len(_wait_for_runs(rest, deployment["id"], job.job_id, timeout_s=0, since=served["since"])) == 1


@pytest.mark.prefect
@pytest.mark.slow
def test_event_spooled_while_prefect_was_down_is_delivered_by_pitstop_up(served: dict, isolated_home: Path) -> None:
    """The epilog could not reach Prefect; `pitstop up`'s deliverer sends it, the flow runs."""
    from tests.triggers.conftest import closed_port_url

    demo = DemoCluster.create(isolated_home / "demo", nodes=8, seed=5)
    [fault] = demo.inject_faults(1, kinds=["software_bug"])
    hook_env = {"PITSTOP_HOME": str(isolated_home), "PREFECT_API_URL": closed_port_url(),
                # demo job ids restart at 1000 in every demo cluster: another name keeps this
                # event (and its incident) apart from the other test's job 1000
                "SLURM_JOB_ID": fault.job_id, "SLURM_CLUSTER_NAME": "demo-spooled",
                "SLURM_JOB_EXIT_CODE2": "1:0", "SLURM_JOB_NODELIST": ",".join(fault.nodes)}
    proc = subprocess.run([str(PITSTOP_BIN), "epilog"], env=hook_env, capture_output=True, timeout=30)
    assert proc.returncode == 0 and b"unreachable" in proc.stderr
    runs = _wait_for_runs(served["rest"], served["deployment"]["id"], fault.job_id, timeout_s=60,
                          since=served["since"])
    assert len(runs) == 1, f"spooled event not delivered by pitstop up:\n{served['log'].read_text()[-3000:]}"
    assert Spool(isolated_home / "spool").pending_paths() == []
