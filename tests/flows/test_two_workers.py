"""Several machines, as far as one machine can show it: a Prefect server on PostgreSQL, a process
work pool with two `prefect worker` processes, Pitstop's store on PostgreSQL, the real dev
cluster (Slurm + sshd).

A job fails on Slurm with an Xid 79. The same job-ended event is delivered twice (as a retried
epilog or a reconciler would), so the server holds two runs of post-failure with the same
parameters; each worker takes one (`--limit 1`) and they run side by side. Exactly one
remediates: one incident, each action journaled once, the node drained once and the job
requeued once (Slurm's restart count is 1). The other run finds the incident locked (the
PostgreSQL advisory lock, pitstop.store.locks) or already done.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from pitstop.processes import stop_process_group
from pitstop.store.tables import ActionRecord, Incident
from tests.cluster.conftest import dev_cluster_env, slurm_cluster, sshd  # noqa: F401  (session fixtures)
from tests.flows.conftest import act_on_dev_cluster, rows, wait_for
from tests.flows.test_dev_cluster import JOB_SCRIPT, SMALL_CLUSTER_LIMITS, _scontrol_field
from tests.store.conftest import fresh_database
from tests.support.net import free_port
from tests.support.prefect_server import server_environment

pytestmark = [pytest.mark.cluster, pytest.mark.prefect, pytest.mark.slow]

PREFECT = str(Path(sys.executable).with_name("prefect"))
SERVER_START_S = 240  # a fresh database runs every Prefect migration first (~60 s on 2 busy cores)


@dataclass(frozen=True)
class PgPrefect:
    api_url: str
    env: dict[str, str]  # what a client of this server (a worker) needs
    log: Path


def _healthy(api_url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture
def pg_prefect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PgPrefect]:
    """A Prefect server of its own on a fresh PostgreSQL database (postgresql+asyncpg)."""
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE, temporary_settings

    with fresh_database("prefect_test") as url:
        db_url = make_url(url).set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)
        port = free_port()
        api_url = f"http://127.0.0.1:{port}/api"
        env = {**server_environment(tmp_path / "prefect-home", api_url, api_url.removesuffix("/api")),
               "PREFECT_API_DATABASE_CONNECTION_URL": db_url}
        log = tmp_path / "prefect-server.log"
        with log.open("wb") as out:
            server = subprocess.Popen([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port),
                                       "--analytics-off"], env={**os.environ, **env}, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + SERVER_START_S
            while not _healthy(api_url):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"Prefect server on PostgreSQL did not come up:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
            client_env = {k: v for k, v in env.items() if k != "PREFECT_API_DATABASE_CONNECTION_URL"}
            for key, value in client_env.items():
                monkeypatch.setenv(key, value)
            with temporary_settings(updates={PREFECT_API_URL: api_url, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE: False}):
                yield PgPrefect(api_url, client_env, log)
        finally:
            stop_process_group(server, grace_s=15)


def _start_worker(name: str, pool: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_LOGGING_TO_API_ENABLED": "true"}
    with log.open("wb") as out:
        return subprocess.Popen([PREFECT, "worker", "start", "--pool", pool, "--type", "process", "--limit", "1",
                                 "--name", name], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _flow_logs(client, run_id) -> list[str]:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    return [entry.message for entry in client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))]


def test_one_event_twice_on_two_workers_is_one_remediation(
    pg_prefect, slurm_cluster, sshd, mailbox, use_policy, monkeypatch, tmp_path  # noqa: F811
) -> None:
    from prefect.client.orchestration import get_client

    from deployments.work_pool import deploy_to_pool, pool_deployments
    from pitstop.config import load_settings

    slurm = slurm_cluster
    use_policy(**SMALL_CLUSTER_LIMITS)
    act_on_dev_cluster(monkeypatch, slurm, sshd)
    monkeypatch.setenv("PITSTOP_PIPELINE__KERNEL_LOG_ARGV", json.dumps(["dmesg"]))
    with fresh_database() as store_url:
        monkeypatch.setenv("PITSTOP_DATABASE_URL", store_url)  # the workers' and this test's store
        pool = f"pitstop-test-{uuid.uuid4().hex[:6]}"
        [post_failure] = [d for d in pool_deployments(load_settings(), health_sweep=False)
                          if d.name == "post-failure"]
        deployment_id = deploy_to_pool(pool, [post_failure])["post-failure"]
        logs = {name: tmp_path / f"{name}.log" for name in ("worker-a", "worker-b")}
        workers = [_start_worker(name, pool, log) for name, log in logs.items()]
        job_id = slurm.submit("-J", "pitstop-two-workers", "-N1", "-o", "two-workers-%j.out", script=JOB_SCRIPT)
        node = None
        try:
            slurm.wait_state(job_id, "FAILED", timeout_s=90)
            node = _scontrol_field(slurm, "job", job_id, "NodeList")
            end = _scontrol_field(slurm, "job", job_id, "EndTime")
            facts = {"job_id": job_id, "cluster": "devcluster", "state": "FAILED", "exit_code": 1,
                     "end_time": datetime.fromisoformat(end).replace(tzinfo=timezone.utc).isoformat()}
            with get_client(sync_client=True) as client:
                wait_for(lambda: len([w for w in client.read_workers_for_work_pool(pool) if w.status == "ONLINE"]) == 2,
                         120, "both workers online", interval=0.5, log=logs["worker-b"])
                # the same delivery twice, as the automation makes a run per delivery
                params = {"job_id": job_id, "cluster": "devcluster", "facts": facts}
                runs = [client.create_flow_run_from_deployment(uuid.UUID(deployment_id), parameters=params)
                        for _ in range(2)]
                ids = [str(r.id) for r in runs]

                def finished():
                    states = [client.read_flow_run(r.id).state for r in runs]
                    return states if all(s is not None and s.is_final() for s in states) else None

                states = wait_for(finished, 240, "both flow runs to finish", interval=1, log=logs["worker-a"])
                assert all(s.is_completed() for s in states), [(s.name, s.message) for s in states]
                messages = {i: "\n".join(_flow_logs(client, r.id)) for i, r in zip(ids, runs)}
            # Both runs went through the pool's workers. Which worker took which is up to Prefect
            # (a loaded machine can let one worker take both, one after the other); the point is
            # what follows: one remediation whichever way they were shared.
            ran = {name: {i for i in ids if i in log.read_text(errors="replace")} for name, log in logs.items()}
            assert set().union(*ran.values()) == set(ids), ran

            # one remediation in the store ...
            [incident] = rows(Incident)
            assert (incident.job_id, incident.status) == (job_id, "done")
            assert incident.flow_run_id in ids
            other = next(i for i in ids if i != incident.flow_run_id)
            assert ("leaving it to that run" in messages[other]
                    or "already remediated: nothing to do" in messages[other]), messages[other]
            journal = rows(ActionRecord)
            assert len({a.seq for a in journal}) == len(journal)
            by_kind = {a.kind: a for a in journal}
            assert by_kind["drain"].state == by_kind["requeue"].state == "done"
            # ... and on the cluster: drained by that incident, requeued once
            assert f"incident={incident.id}" in _scontrol_field(slurm, "node", node, "Reason")
            assert _scontrol_field(slurm, "job", job_id, "Restarts") == "1"
        finally:
            for proc in workers:
                stop_process_group(proc, grace_s=15)
            slurm.cancel(job_id)
            if node:
                slurm.slurm("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
