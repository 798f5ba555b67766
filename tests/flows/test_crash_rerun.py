"""A post_failure run SIGKILLed mid-action and run again repeats nothing; a duplicate delivery
while the first run is still alive leaves the incident to it.

The flow runs in a real child process against the session's Prefect server; the demo cluster
takes 2 s per change (`pipeline.demo_op_delay_s`) so the kill lands after the requeuehold (or
the resubmission) reached the cluster but before the journal heard back - the worst moment for
a crash. tests/flows/test_act_requeue.py covers every other interruption point directly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pitstop.store.tables import ActionRecord, Incident
from tests.flows.conftest import rows, wait_for

pytestmark = [pytest.mark.prefect, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CHILD = "import sys; from flows.post_failure import post_failure; print(post_failure(sys.argv[1]).model_dump_json())"
# The plans under test, pinned (the built-in policy's ladders add steps these tests are not about).
XID79_RULE = {"cause": "gpu_hardware", "signature": "xid-79", "description": "test: drain and requeue",
              "actions": ["drain", {"requeue": {"exclude_faulty_nodes": True}}, "notify_ops"]}
NCCL_RULE = {"cause": "nccl_timeout", "description": "test: retry with NCCL logging",
             "actions": [{"requeue": {"exclude_faulty_nodes": True, "env": {"NCCL_DEBUG": "INFO"}}}, "notify_ops"]}


def _journal() -> dict[str, str]:
    return {a.kind: a.state for a in rows(ActionRecord)}


def _child_log(isolated_home: Path) -> Path:
    return isolated_home.parent / "child.log"


def _start_child(isolated_home: Path, job_id: str) -> tuple[subprocess.Popen, object]:
    env = {**os.environ, "PITSTOP_PIPELINE__DEMO_OP_DELAY_S": "2"}
    log = _child_log(isolated_home).open("wb")
    child = subprocess.Popen([sys.executable, "-c", CHILD, job_id], cwd=REPO, env=env,
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return child, log


def _kill(child: subprocess.Popen) -> None:
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)


def _kill_when(child: subprocess.Popen, demo, reached, passed, what: str, log_path: Path) -> None:
    """Kill the child the moment the cluster shows `reached` (a set of ops), checked and killed
    under the cluster's lock so that no next change can land between the two. Its 2-s delay
    after each change is the window; a loaded machine can stall the child itself for long, so
    the wait is generous, and a window missed (`passed` already there) fails at once, saying so."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with demo.frozen() as actions:
            ops = {a.op for a in actions}
            if passed(ops):
                raise AssertionError(f"missed the moment ({what}): the cluster already shows {sorted(ops)}")
            if reached(ops):
                _kill(child)
                return
        if child.poll() is not None:
            raise AssertionError(f"the child ended (rc {child.returncode}) before {what}:\n"
                                 f"{log_path.read_text(errors='replace')[-4000:]}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}:\n{log_path.read_text(errors='replace')[-4000:]}")


def _reap(child: subprocess.Popen, log) -> None:
    if child.poll() is None:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(10)
    log.close()


def test_killed_mid_action_then_rerun_repeats_nothing(prefect_server, demo, isolated_home, use_policy):
    from flows.post_failure import post_failure

    use_policy([XID79_RULE])
    [fault] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])
    child, log = _start_child(isolated_home, fault.job_id)
    try:
        wait_for(lambda: _journal().get("drain") == "running", 90, "the child to start draining")
        # A second delivery of the same event while the first run is alive: it must not act.
        duplicate = post_failure(fault.job_id)
        assert duplicate.status == "busy", duplicate

        # requeuehold applied, its ExcNodeList update not yet, the journal still says "running"
        _kill_when(child, demo, lambda ops: "requeue" in ops, lambda ops: "update_job" in ops,
                   "the requeuehold to reach the cluster", _child_log(isolated_home))
    finally:
        _reap(child, log)
    assert child.returncode == -signal.SIGKILL
    assert _journal()["drain"] == "done" and _journal()["requeue"] == "running"
    before = [(a.op, a.target) for a in demo.actions()]
    assert before.count(("drain", fault.nodes[0])) == 1 and before.count(("requeue", fault.job_id)) == 1
    assert demo.job(fault.job_id).is_held  # held: it cannot start on the bad node meanwhile
    [incident] = rows(Incident)
    assert incident.status == "acting"

    report = post_failure(fault.job_id)  # the operator (or a retry) runs it again

    assert report.status == "done"
    ops = [(a.op, a.target) for a in demo.actions()]
    assert ops.count(("drain", fault.nodes[0])) == 1, ops
    assert ops.count(("requeue", fault.job_id)) == 1, ops
    assert ops.count(("update_job", fault.job_id)) == 1, ops  # the part that had not happened
    assert ops.count(("release", fault.job_id)) == 1, ops
    assert ops.index(("update_job", fault.job_id)) < ops.index(("release", fault.job_id))
    job = demo.job(fault.job_id)
    assert job.restart_count == 1 and fault.nodes[0] in job.excluded_nodes and not job.is_held
    lines = {a.kind: a for a in report.actions}
    assert "earlier run" in lines["drain"].detail
    assert f"requeued job {fault.job_id} (held by an interrupted run, ExcNodeList={fault.nodes[0]}" in lines["requeue"].detail
    journal = _journal()
    assert journal["drain"] == journal["requeue"] == "done" and journal["notify_ops"] == "done"
    [incident] = rows(Incident)
    assert incident.status == "done"

    again = post_failure(fault.job_id)  # and the same event once more: nothing at all
    assert again.status == "duplicate"
    assert [(a.op, a.target) for a in demo.actions()] == ops


def test_killed_after_resubmission_then_rerun_submits_nothing_more(prefect_server, demo, isolated_home, use_policy):
    """An NCCL timeout is retried with NCCL_* variables: a resubmission (Slurm cannot change a
    job's environment). Killed after sbatch, before the journal heard: the re-run finds the
    tagged job instead of submitting a second one."""
    from flows.post_failure import post_failure

    use_policy([NCCL_RULE])
    [fault] = demo.inject_faults(1, kinds=["nccl_watchdog"])
    child, log = _start_child(isolated_home, fault.job_id)
    try:
        _kill_when(child, demo, lambda ops: "resubmit" in ops,
                   lambda ops: _journal().get("requeue") == "done",
                   "the resubmission to reach the cluster", _child_log(isolated_home))
    finally:
        _reap(child, log)
    assert _journal()["requeue"] == "running"
    [submitted] = [a for a in demo.actions() if a.op == "resubmit"]
    new_id = submitted.detail["new_job_id"]
    assert submitted.detail["env"]["NCCL_DEBUG"] == "INFO"

    report = post_failure(fault.job_id)

    assert report.status == "done"
    assert [a.op for a in demo.actions()].count("resubmit") == 1
    assert demo.find_resubmission(fault.job_id) == new_id
    assert demo.job_environment(new_id)["NCCL_DEBUG"] == "INFO"
    assert _journal()["requeue"] == "done"
    lines = {a.kind: a for a in report.actions}
    assert "confirmed from the cluster's state" in lines["requeue"].detail
