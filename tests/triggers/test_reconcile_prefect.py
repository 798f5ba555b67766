"""Reconciliation against the real Prefect server, with `pitstop up` as a real process:

- a burst of job-ended events while Prefect's automation misses some (switched off for part of
  the burst, as when it answered 503 / "database is locked"): every job still gets exactly one
  incident, the missed ones through runs the reconciler started;
- `kill -9` of `pitstop up` in the middle of a drain (act mode, demo cluster): the next
  `pitstop up` resumes the incident by itself, and every action happens once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from pitstop.events.deliver import PrefectEventsClient
from pitstop.events.models import JOB_ENDED, JobEnded
from pitstop.processes import stop_process_group
from pitstop.store import Store
from pitstop.store.tables import ActionRecord, Incident
from tests.flows.conftest import wait_for
from tests.triggers.conftest import PITSTOP_BIN, PrefectRest
from tests.triggers.up import job_automation, patch, start_up, up_env

pytestmark = [pytest.mark.prefect, pytest.mark.slow]

FAST_RECONCILE = {"TRIGGERS__RECONCILE_INTERVAL_S": "2", "TRIGGERS__RECONCILE_GRACE_S": "3",
                  "TRIGGERS__RECONCILE_LOOKBACK_S": "600", "TRIGGERS__RECONCILE_STALE_S": "60"}
BURST = 20
MISSED = 7


def _rows(home: Path, model):
    from sqlmodel import select

    store = Store(f"sqlite:///{home / 'pitstop.db'}")
    try:
        with store.session() as s:
            return list(s.exec(select(model)))
    finally:
        store.dispose()


def _wait(predicate, timeout_s: float, what: str, log: Path, interval: float = 1.0):
    return wait_for(predicate, timeout_s, what, interval=interval, log=log)


def _stored(api_url: str, ids: list[str]) -> bool:
    client = PrefectEventsClient(api_url, timeout_s=10)
    since = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat()
    return len(client.query([JOB_ENDED], since, ids=ids)) == len(ids)


def _events(cluster: str, first_job: int, n: int) -> list[JobEnded]:
    now = datetime.now(timezone.utc)
    return [JobEnded(cluster=cluster, job_id=str(first_job + i), state="FAILED", exit_code=1, nodes=["gpu01"],
                     end_time=now - timedelta(seconds=n - i)) for i in range(n)]


def test_burst_with_runs_the_automation_missed_ends_with_one_incident_per_job(warm_prefect, isolated_home: Path) -> None:
    rest = PrefectRest(warm_prefect.api_url)
    log = isolated_home.parent / "pitstop-up.log"
    proc = start_up(up_env(isolated_home, warm_prefect.api_url, **FAST_RECONCILE), log, rest)
    cluster = f"burst-{uuid.uuid4().hex[:8]}"  # other tests' jobs on the shared server stay apart
    jobs = _events(cluster, 7000, BURST)
    client = PrefectEventsClient(warm_prefect.api_url, timeout_s=30)
    automation = job_automation(rest)
    try:
        patch(warm_prefect.api_url, f"/automations/{automation['id']}", {"enabled": False})
        time.sleep(2)
        client.send([j.to_wire().to_api() for j in jobs[:MISSED]])  # the automation drops these
        _wait(lambda: _stored(warm_prefect.api_url, [j.event_id for j in jobs[:MISSED]]), 30, "the events", log)
        time.sleep(3)  # past the trigger service, which saw no automation for them
    finally:
        patch(warm_prefect.api_url, f"/automations/{automation['id']}", {"enabled": True})
    try:
        time.sleep(2)
        client.send([j.to_wire().to_api() for j in jobs[MISSED:]])
        mine = lambda: [i for i in _rows(isolated_home, Incident) if i.cluster == cluster]  # noqa: E731
        _wait(lambda: len(mine()) >= BURST and all(i.status == "done" for i in mine()), 240,
              f"{BURST} finished incidents", log)
        deployment = rest.deployment("post-failure", "post-failure")
        runs = lambda: [r for r in rest.flow_runs(deployment["id"]) if r["parameters"].get("cluster") == cluster]  # noqa: E731
        # A late automation run for an event reconciliation already answered finds the incident
        # done ("duplicate"); let them end here rather than in the next test's `pitstop up`.
        _wait(lambda: all(r["state_type"] in {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"} for r in runs()),
              120, "every run of the burst to end", log)
    finally:
        stop_process_group(proc, grace_s=30)
    per_job = Counter(i.job_id for i in mine())
    assert sorted(per_job) == sorted(j.job_id for j in jobs) and set(per_job.values()) == {1}
    runs = runs()
    reconciled = {r["parameters"]["job_id"] for r in runs if "pitstop-reconciled" in r["tags"]}
    # At least the switched-off part went through reconciliation (on a loaded machine the live
    # automation drops some of the rest too: that is what this is for).
    assert reconciled, "no run was started by reconciliation: the automation missed nothing?"
    # The missed runs carry the parameters the automation would have given them: compared with
    # the automation's own template, since on a loaded machine reconciliation may have started
    # every run of the burst and left no automatic one to compare with.
    template = next(a for a in automation["actions"] if a["type"] == "run-deployment")["parameters"]
    started = next(r for r in runs if "pitstop-reconciled" in r["tags"])
    assert set(started["parameters"]) == set(template) == {"job_id", "cluster", "facts"}
    assert started["parameters"]["facts"] == jobs[int(started["parameters"]["job_id"]) - 7000].to_wire().payload
    assert b"reconcile: " in log.read_bytes() and b"the automation dropped it" in log.read_bytes()

    # `pitstop reconcile` (the cron form) over the same window: all of it is settled now
    env = up_env(isolated_home, warm_prefect.api_url, **FAST_RECONCILE)
    done = subprocess.run([str(PITSTOP_BIN), "reconcile", "--dry-run", "--json"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr  # 1: another test's event given up on, not ours
    report = json.loads(done.stdout)
    assert report["events"] >= BURST and report["plan"]["settled"] >= BURST
    assert not [s for s in report["plan"]["start"] if s["parameters"].get("cluster") == cluster]


def test_reconcile_says_when_it_cannot_read(isolated_home: Path) -> None:
    from tests.triggers.conftest import closed_port_url

    env = {**os.environ, "PITSTOP_HOME": str(isolated_home), "PREFECT_API_URL": closed_port_url()}
    proc = subprocess.run([str(PITSTOP_BIN), "reconcile"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "does not answer /health" in proc.stderr


XID79_RULE = {"cause": "gpu_hardware", "signature": "xid-79", "description": "test: drain and requeue",
              "actions": ["drain", {"requeue": {"exclude_faulty_nodes": True}}, "notify_ops"]}


def test_kill_9_of_pitstop_up_mid_drain_is_resumed_by_the_next_up(isolated_home: Path, tmp_path: Path) -> None:
    """The whole scenario on a Prefect server of its own, started by `pitstop up` as on a real
    machine (the shared one may still be working off other tests' events, in act mode here)."""
    from pitstop.cluster.demo import DemoCluster
    from pitstop.procid import still_running
    from tests.flows.conftest import write_policy
    from tests.support.net import free_port

    demo = DemoCluster.create(isolated_home / "demo", nodes=8, seed=3)
    [fault] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])
    job = demo.job(fault.job_id)
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    env = up_env(isolated_home, api_url, MODE="act", PIPELINE__DEMO_OP_DELAY_S="3",
                 POLICY__FILE=str(write_policy(tmp_path / "policy.yaml", [XID79_RULE])),
                 TRIGGERS__SERVER_PORT=str(port), **FAST_RECONCILE)
    env.pop("PREFECT_API_URL")  # no server configured: `pitstop up` starts its own
    rest = PrefectRest(api_url)
    log = isolated_home.parent / "pitstop-up.log"
    first = start_up(env, log, rest, timeout_s=240)
    server = json.loads((isolated_home / "prefect" / "server.json").read_text())
    try:
        _kill_mid_drain_then_restart(env, log, rest, api_url, isolated_home, first, server, demo, fault, job)
    finally:
        stop_process_group(first, grace_s=5)
        if still_running(server):  # never leave a server behind, whatever failed
            os.killpg(server["pid"], signal.SIGKILL)


def _kill_mid_drain_then_restart(env, log, rest, api_url, home, first, server, demo, fault, job) -> None:
    from pitstop.procid import still_running

    event = JobEnded(cluster="demo", job_id=job.job_id, state="FAILED", exit_code=1, nodes=job.nodes,
                     end_time=datetime.now(timezone.utc))
    PrefectEventsClient(api_url, timeout_s=30).send([event.to_wire().to_api()])
    _wait(lambda: _rows(home, Incident), 120, "the incident", log, interval=0.2)
    journal = lambda: {a.kind: a.state for a in _rows(home, ActionRecord)}  # noqa: E731
    _wait(lambda: journal().get("drain") == "running", 120, "the drain to start", log, interval=0.2)
    os.kill(first.pid, signal.SIGKILL)  # `pitstop up` only: its fast lane ran the flow in-process
    first.wait(10)
    assert still_running(server) is True  # the killed `up`'s server lives on, in its own session
    [incident] = _rows(home, Incident)
    assert incident.status == "acting"
    killed_run = incident.flow_run_id
    deployment = rest.deployment("post-failure", "post-failure")
    assert next(r for r in rest.flow_runs(deployment["id"]) if r["id"] == killed_run)["state_type"] == "RUNNING"

    second = start_up(env, log, rest, restart=True)  # a restart, nothing else: no manual re-run
    try:
        _wait(lambda: _rows(home, Incident)[0].status == "done", 180, "the incident to finish after the restart", log)
        # Under load the first `up`'s reconciler may itself have started the killed run (the automation
        # not yet there: "the automation dropped it"), so the killed run can carry the tag too.
        resumed = lambda r: "pitstop-reconciled" in r["tags"] and r["id"] != killed_run  # noqa: E731
        resumed_runs = lambda: [r for r in rest.flow_runs(deployment["id"]) if resumed(r)]  # noqa: E731
        _wait(lambda: all(r["state_type"] == "COMPLETED" for r in resumed_runs()), 60, "the resumed run to end", log)
        runs = {r["id"]: r for r in rest.flow_runs(deployment["id"])}
    finally:
        stop_process_group(second, grace_s=60)
    assert still_running(server) is False  # adopted, and stopped with the `up` that adopted it
    assert "adopted the Prefect server" in log.read_text(errors="replace")
    ops = [(a.op, a.target) for a in demo.actions()]
    assert ops.count(("drain", fault.nodes[0])) == 1, ops
    assert ops.count(("requeue", job.job_id)) == 1, ops
    assert journal() == {"drain": "done", "requeue": "done", "notify_ops": "done"}
    assert runs[killed_run]["state_type"] == "CRASHED"
    [resumed_run] = [r for r in runs.values() if resumed(r)]
    assert resumed_run["state_type"] == "COMPLETED" and resumed_run["parameters"] == runs[killed_run]["parameters"]
    assert "is acting but no live run handles it" in log.read_text(errors="replace")
