"""A post_failure run SIGKILLed mid-action and run again repeats nothing; a duplicate delivery
while the first run is still alive leaves the incident to it.

The flow runs in a real child process against the session's Prefect server; the demo cluster
takes 2 s per change (`pipeline.demo_op_delay_s`) so the kill lands after the requeue reached
the cluster but before the journal heard back - the worst moment for a crash.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pitstop.store.tables import ActionRecord, Incident
from tests.flows.conftest import rows, wait_for

pytestmark = [pytest.mark.prefect, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CHILD = "import sys; from flows.post_failure import post_failure; print(post_failure(sys.argv[1]).model_dump_json())"


def _journal() -> dict[str, str]:
    return {a.kind: a.state for a in rows(ActionRecord)}


def test_killed_mid_action_then_rerun_repeats_nothing(prefect_server, demo, isolated_home):
    from flows.post_failure import post_failure

    [fault] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])
    env = {**os.environ, "PITSTOP_PIPELINE__DEMO_OP_DELAY_S": "2"}
    log = (isolated_home.parent / "child.log").open("wb")
    child = subprocess.Popen([sys.executable, "-c", CHILD, fault.job_id], cwd=REPO, env=env,
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: _journal().get("drain") == "running", 90, "the child to start draining")
        # A second delivery of the same event while the first run is alive: it must not act.
        duplicate = post_failure(fault.job_id)
        assert duplicate.status == "busy", duplicate

        def requeued_not_updated() -> bool:
            ops = {a.op for a in demo.actions()}
            return "requeue" in ops and "update_job" not in ops

        # requeue applied, its ExcNodeList update not yet, the journal still says "running"
        wait_for(requeued_not_updated, 30, "the requeue to reach the cluster", interval=0.05)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(10)
        log.close()
    assert child.returncode == -signal.SIGKILL
    assert _journal()["drain"] == "done" and _journal()["requeue"] == "running"
    before = [(a.op, a.target) for a in demo.actions()]
    assert before.count(("drain", fault.nodes[0])) == 1 and before.count(("requeue", fault.job_id)) == 1
    [incident] = rows(Incident)
    assert incident.status == "acting"

    report = post_failure(fault.job_id)  # the operator (or a retry) runs it again

    assert report.status == "done"
    ops = [(a.op, a.target) for a in demo.actions()]
    assert ops.count(("drain", fault.nodes[0])) == 1, ops
    assert ops.count(("requeue", fault.job_id)) == 1, ops
    assert ops.count(("update_job", fault.job_id)) == 1, ops  # the half that had not happened
    job = demo.job(fault.job_id)
    assert job.restart_count == 1 and fault.nodes[0] in job.excluded_nodes
    lines = {a.kind: a for a in report.actions}
    assert "earlier run" in lines["drain"].detail
    assert "already requeued by an interrupted run" in lines["requeue"].detail
    journal = _journal()
    assert journal["drain"] == journal["requeue"] == "done" and journal["notify_ops"] == "done"
    [incident] = rows(Incident)
    assert incident.status == "done"

    again = post_failure(fault.job_id)  # and the same event once more: nothing at all
    assert again.status == "duplicate"
    assert [(a.op, a.target) for a in demo.actions()] == ops
