"""Restarting `pitstop up` with two approvals pending: stopping it is prompt (one SIGTERM) and
denies nothing; after the restart both questions are answerable (`pitstop approvals`) and each,
when approved, acts once.

`pitstop up` runs as a real process with a Prefect server of its own (as on a real machine; the
shared test server may still be busy with other tests' runs), in act mode on the demo cluster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pitstop.events.deliver import PrefectEventsClient
from pitstop.events.models import JobEnded
from pitstop.processes import stop_process_group
from pitstop.store.tables import ActionRecord, Incident, Ticket
from tests.flows.test_approval import RMA_RULE
from tests.triggers.conftest import PITSTOP_BIN, PrefectRest
from tests.triggers.test_reconcile_prefect import FAST_RECONCILE, _rows, _wait
from tests.triggers.up import start_up, up_env

pytestmark = [pytest.mark.prefect, pytest.mark.slow]

STOP_WITHIN_S = 30  # was ~70 s and a second SIGTERM


def _questions(home: Path) -> dict[int, dict]:
    """incident -> the approval question noted on its rma_ticket step, while it waits."""
    return {a.incident_id: a.params.get("approval") or {} for a in _rows(home, ActionRecord)
            if a.kind == "rma_ticket" and a.state == "awaiting_approval" and (a.params or {}).get("approval")}


def test_two_pending_approvals_survive_a_restart_and_each_acts_once(isolated_home: Path, tmp_path: Path) -> None:
    from pitstop.cluster.demo import DemoCluster
    from pitstop.procid import still_running
    from tests.flows.conftest import write_policy
    from tests.support.net import free_port

    demo = DemoCluster.create(isolated_home / "demo", nodes=8, seed=3)
    faults = demo.inject_faults(2, kinds=["gpu_fell_off_bus"])
    assert len({f.nodes[0] for f in faults}) == 2
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    env = up_env(isolated_home, api_url, MODE="act", PIPELINE__APPROVAL_TIMEOUT_S="900",
                 POLICY__FILE=str(write_policy(tmp_path / "policy.yaml", [RMA_RULE])),
                 TRIGGERS__SERVER_PORT=str(port), **FAST_RECONCILE)
    env.pop("PREFECT_API_URL")  # `pitstop up` starts its own server
    rest = PrefectRest(api_url)
    log = isolated_home.parent / "pitstop-up.log"
    first = start_up(env, log, rest, timeout_s=240)
    server = json.loads((isolated_home / "prefect" / "server.json").read_text())
    second = None
    try:
        events = [JobEnded(cluster="demo", job_id=f.job_id, state="FAILED", exit_code=1,
                           nodes=demo.job(f.job_id).nodes, end_time=datetime.now(timezone.utc)) for f in faults]
        PrefectEventsClient(api_url, timeout_s=30).send([e.to_wire().to_api() for e in events])
        _wait(lambda: len(_questions(isolated_home)) == 2, 240, "two approval questions", log)
        before = _questions(isolated_home)

        started = time.monotonic()
        os.kill(first.pid, signal.SIGTERM)  # one SIGTERM, as systemd sends
        first.wait(STOP_WITHIN_S + 30)
        took = time.monotonic() - started
        assert took < STOP_WITHIN_S, f"`pitstop up` took {took:.0f} s to stop"
        # nothing was denied: both questions are still open in the journal
        assert {a.incident_id: a.state for a in _rows(isolated_home, ActionRecord) if a.kind == "rma_ticket"} == {
            i: "awaiting_approval" for i in before}
        assert all(i.status == "awaiting_approval" for i in _rows(isolated_home, Incident))
        assert b"could not wait for approval" not in log.read_bytes()

        second = start_up(env, log, rest, timeout_s=240, restart=True)
        # the reconciliation picks each incident up again; its new run asks again (same deadline)
        _wait(lambda: all(q.get("flow_run_id") not in {None, before[i]["flow_run_id"]}
                          for i, q in _questions(isolated_home).items()) and len(_questions(isolated_home)) == 2,
              240, "both questions asked again by new runs", log)
        after = _questions(isolated_home)
        assert {i: q["deadline"] for i, q in after.items()} == {i: q["deadline"] for i, q in before.items()}
        cli_env = {**env, "PREFECT_API_URL": api_url, "COLUMNS": "250"}
        listed = subprocess.run([str(PITSTOP_BIN), "approvals"], env=cli_env, capture_output=True, text=True,
                                timeout=120)
        assert all(f"rma_ticket {f.nodes[0]}" in listed.stdout for f in faults), listed.stdout
        for incident_id in after:
            _wait(lambda: _paused(rest, after[incident_id]["flow_run_id"]), 60, "the new run to be Paused", log)
            done = subprocess.run([str(PITSTOP_BIN), "approvals", "approve", str(incident_id), "--by", "frank",
                                   "--comment", "after the restart"], env=cli_env, capture_output=True, text=True,
                                  timeout=120)
            assert done.returncode == 0, done.stdout + done.stderr
        _wait(lambda: all(i.status == "done" for i in _rows(isolated_home, Incident)), 240,
              "both incidents to finish", log)
    finally:
        for proc in (first, second):
            if proc is not None:
                stop_process_group(proc, grace_s=30)
        if still_running(server):
            os.killpg(server["pid"], signal.SIGKILL)
    tickets = _rows(isolated_home, Ticket)
    assert sorted(t.node for t in tickets) == sorted(f.nodes[0] for f in faults)  # one each, once
    ops = [(a.op, a.target) for a in demo.actions()]
    for f in faults:
        assert ops.count(("drain", f.nodes[0])) == 1, ops
    for record in (a for a in _rows(isolated_home, ActionRecord) if a.kind == "rma_ticket"):
        assert record.state == "done" and record.result.startswith("approved by frank: after the restart"), record


def _paused(rest: PrefectRest, flow_run_id: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(f"{rest.api_url}/flow_runs/{flow_run_id}", timeout=10) as response:
        return json.loads(response.read())["state"]["type"] == "PAUSED"
