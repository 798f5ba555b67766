"""`requeue_with_changes` on the real dev cluster, read back with scontrol/squeue (not the
adapter): hold -> update -> release in place, a tagged resubmission for env changes, a failed
update that leaves the job held, and the demo backend refusing exactly what Slurm refuses."""

from __future__ import annotations

import re
import threading
import time

import pytest

from pitstop.cluster.base import (
    MAX_TIME_LIMIT_MIN,
    ClusterError,
    InvalidJobChanges,
    JobChanges,
    JobLeftHeld,
    RequeueMode,
)
from pitstop.cluster.demo import DemoCluster

pytestmark = pytest.mark.cluster

RUN_SCRIPT = "#!/bin/sh\necho run ${SLURM_RESTART_COUNT:-0} on $SLURMD_NODENAME\nsleep 300\n"


@pytest.fixture(scope="module")
def sched(slurm_cluster):
    return slurm_cluster.scheduler()


def _field(slurm_cluster, job_id: str, name: str) -> str:
    out = slurm_cluster.slurm("scontrol", "-o", "show", "job", job_id)
    match = re.search(rf"(?:^|\s){name}=(\S*)", out)
    return match.group(1) if match else ""


def _running_on(slurm_cluster, job_id: str, timeout_s: float = 90) -> str:
    slurm_cluster.wait_state(job_id, "RUNNING", timeout_s=timeout_s)
    return _field(slurm_cluster, job_id, "NodeList")


class _Watch:
    """Samples the job's state and node list until stopped: proof of where it ever ran."""

    def __init__(self, slurm_cluster, job_id: str) -> None:
        self.samples: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(slurm_cluster, job_id), daemon=True)
        self._thread.start()

    def _loop(self, slurm_cluster, job_id: str) -> None:
        while not self._stop.is_set():
            out = slurm_cluster.slurm("scontrol", "-o", "show", "job", job_id, check=False)
            state = re.search(r"JobState=(\S+)", out)
            nodes = re.search(r"(?:^|\s)NodeList=(\S+)", out)
            if state:
                self.samples.append((state.group(1), nodes.group(1) if nodes else ""))
            time.sleep(0.1)

    def stop(self) -> list[tuple[str, str]]:
        self._stop.set()
        self._thread.join(10)
        return self.samples


def test_requeue_in_place_applies_exclusion_and_time_limit_before_it_can_run(slurm_cluster, sched) -> None:
    job_id = slurm_cluster.submit("-J", "t-rwc", "-o", "rwc-%j.out", "--open-mode=append", script=RUN_SCRIPT)
    try:
        bad = _running_on(slurm_cluster, job_id)
        watch = _Watch(slurm_cluster, job_id)
        try:
            result = sched.requeue_with_changes(job_id, JobChanges(exclude_nodes=[bad], time_limit_min=7))
            # held at once, changed, released: read back by scontrol itself
            assert _field(slurm_cluster, job_id, "ExcNodeList") == bad
            assert _field(slurm_cluster, job_id, "TimeLimit") == "00:07:00"
            assert _field(slurm_cluster, job_id, "Restarts") == "1"
            assert _field(slurm_cluster, job_id, "Priority") != "0"  # released
            good = _running_on(slurm_cluster, job_id)  # cred_expire=10: it may start after ~11 s
        finally:
            samples = watch.stop()
        assert result.mode is RequeueMode.IN_PLACE and result.run_job_id == job_id
        assert result.summary == f"requeued job {job_id} (held, ExcNodeList={bad}, TimeLimit=7, released)"
        assert good != bad
        # from the moment the first run stopped: never RUNNING on the excluded node again
        first_stop = next(i for i, (state, _) in enumerate(samples) if state != "RUNNING")
        ran_on = {nodes for state, nodes in samples[first_stop:] if state == "RUNNING"}
        # (the watcher may stop before it samples the second run: what matters is never `bad`)
        assert bad not in ran_on and ran_on <= {good}, samples
        time.sleep(0.5)
        log = (slurm_cluster.jobs_dir / f"rwc-{job_id}.out").read_text()
        assert f"run 0 on {bad}" in log and f"run 1 on {good}" in log and f"run 1 on {bad}" not in log
    finally:
        slurm_cluster.cancel(job_id)


def test_pending_job_is_held_and_released_not_requeued(slurm_cluster, sched) -> None:
    job_id = slurm_cluster.submit("-J", "t-rwc-pend", "--begin=now+3600", "--wrap", "true")
    try:
        result = sched.requeue_with_changes(job_id, JobChanges(exclude_nodes=["gpu04"]))
        assert result.steps == ["held while pending", "ExcNodeList=gpu04", "released"]
        assert _field(slurm_cluster, job_id, "JobState") == "PENDING"
        assert _field(slurm_cluster, job_id, "ExcNodeList") == "gpu04"
        assert _field(slurm_cluster, job_id, "Restarts") == "0"
        assert _field(slurm_cluster, job_id, "Priority") != "0"
    finally:
        slurm_cluster.cancel(job_id)


def test_interrupted_after_requeuehold_is_finished_not_requeued_again(slurm_cluster, sched) -> None:
    job_id = slurm_cluster.submit("-J", "t-rwc-crash", "--wrap", "sleep 300")
    try:
        slurm_cluster.wait_state(job_id, "RUNNING")
        sched.requeue(job_id, hold=True)  # what a run killed right after `scontrol requeuehold` left
        with pytest.raises(ClusterError, match="already held"):  # not knowing it was Pitstop's
            sched.requeue_with_changes(job_id, JobChanges(exclude_nodes=["gpu04"]))
        result = sched.requeue_with_changes(job_id, JobChanges(exclude_nodes=["gpu04"]), resume_held=True)
        assert result.resumed and result.steps == ["held by an interrupted run", "ExcNodeList=gpu04", "released"]
        assert _field(slurm_cluster, job_id, "Restarts") == "1"  # one requeue, not two
        assert _field(slurm_cluster, job_id, "ExcNodeList") == "gpu04"
        assert _field(slurm_cluster, job_id, "Priority") != "0"
    finally:
        slurm_cluster.cancel(job_id)


def test_failed_update_leaves_the_job_held_with_the_release_command(slurm_cluster, sched) -> None:
    job_id = slurm_cluster.submit("-J", "t-rwc-fail", "--wrap", "sleep 300")
    try:
        slurm_cluster.wait_state(job_id, "RUNNING")
        with pytest.raises(JobLeftHeld) as caught:
            sched.requeue_with_changes(job_id, JobChanges(exclude_nodes=["gpu99"], time_limit_min=9))
        message = str(caught.value)
        assert message.startswith(f"job {job_id} is HELD and Pitstop did not release it: "
                                  "setting ExcNodeList=gpu99 failed")
        assert "Invalid node name specified" in message  # Slurm's own words
        assert message.endswith(f"release it by hand: scontrol release {job_id}")
        slurm_cluster.wait_state(job_id, "PENDING", timeout_s=30)
        assert _field(slurm_cluster, job_id, "Priority") == "0"  # held: never scheduled
        assert _field(slurm_cluster, job_id, "Reason") == "job_requeued_in_held_state"
        assert _field(slurm_cluster, job_id, "TimeLimit") != "00:09:00"  # stopped at the failure
    finally:
        slurm_cluster.cancel(job_id)


def test_env_change_resubmits_the_batch_script_once(slurm_cluster, sched) -> None:
    script = "#!/bin/sh\n#SBATCH -J t-rwc-env\necho NCCL_DEBUG=$NCCL_DEBUG on $SLURMD_NODENAME\nexit 3\n"
    old = slurm_cluster.submit("-o", "rwc-env-%j.out", "--comment=the owner's note", script=script)
    new = None
    try:
        slurm_cluster.wait_state(old, "FAILED")
        bad = _field(slurm_cluster, old, "NodeList")
        incident = 900_000 + int(old)  # unique on the shared cluster
        changes = JobChanges(exclude_nodes=[bad], time_limit_min=4, env={"NCCL_DEBUG": "INFO"})
        result = sched.requeue_with_changes(old, changes, incident_id=incident)
        new = result.run_job_id
        assert result.mode is RequeueMode.RESUBMITTED and new != old
        assert result.summary == (f"resubmitted job {old} as {new} with NCCL_DEBUG=INFO, excluding {bad}, "
                                  "time limit 4 min")
        comments = slurm_cluster.slurm("squeue", "-h", "-t", "all", "-o", "%i|%k")
        assert f"{new}|pitstop incident={incident} resubmit-of={old} | the owner's note" in comments.splitlines()

        again = sched.requeue_with_changes(old, changes, incident_id=incident)  # a re-run after a crash
        assert again.run_job_id == new and again.resumed
        tagged = [line for line in slurm_cluster.slurm("squeue", "-h", "-t", "all", "-o", "%i|%k").splitlines()
                  if f"resubmit-of={old}" in line]
        assert len(tagged) == 1, tagged  # submitted once
        assert sched.find_resubmission(old) == new and sched.find_resubmission(old, incident + 1) is None

        slurm_cluster.wait_state(new, "FAILED", timeout_s=90)
        assert _field(slurm_cluster, new, "ExcNodeList") == bad
        assert _field(slurm_cluster, new, "TimeLimit") == "00:04:00"
        time.sleep(0.5)
        out = (slurm_cluster.jobs_dir / f"rwc-env-{new}.out").read_text()
        assert out.startswith("NCCL_DEBUG=INFO on ") and bad not in out
    finally:
        slurm_cluster.cancel(old, *([new] if new else []))


def test_env_change_of_a_pending_job_is_refused(slurm_cluster, sched) -> None:
    job_id = slurm_cluster.submit("-J", "t-rwc-live", "--begin=now+3600", "--wrap", "true")
    try:
        with pytest.raises(ClusterError, match=f"job {job_id} is PENDING: an environment change"):
            sched.requeue_with_changes(job_id, JobChanges(env={"NCCL_DEBUG": "INFO"}))
        assert sched.find_resubmission(job_id) is None
    finally:
        slurm_cluster.cancel(job_id)


# ---- parity: the demo refuses what Slurm refuses, in the same words ------------------------

INVALID = [
    JobChanges(exclude_nodes=["gpu01\n"]),
    JobChanges(exclude_nodes=["gpu[01-02]"]),
    JobChanges(time_limit_min=MAX_TIME_LIMIT_MIN + 1),
    JobChanges(env={"NCCL DEBUG": "INFO"}),
    JobChanges(env={"NCCL_SOCKET_IFNAME": "eth0,eth1"}),
    JobChanges(env={"NCCL_DEBUG": "it's"}),
    JobChanges(env={"NCCL_DEBUG": "INFO\n"}),
]


@pytest.fixture(scope="module")
def held_job(slurm_cluster):
    job_id = slurm_cluster.submit("-J", "t-rwc-parity", "--hold", "--wrap", "true")
    yield job_id
    slurm_cluster.cancel(job_id)


@pytest.mark.parametrize("changes", INVALID, ids=lambda c: repr(c.model_dump(exclude_defaults=True)))
def test_demo_and_slurm_refuse_the_same_changes_with_the_same_message(
    slurm_cluster, sched, held_job, changes, tmp_path
) -> None:
    demo = DemoCluster.create(tmp_path / "demo", nodes=4)
    [fault] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])
    messages = {}
    for name, backend, job_id in (("demo", demo, fault.job_id), ("slurm", sched, held_job)):
        with pytest.raises(InvalidJobChanges) as caught:
            backend.requeue_with_changes(job_id, changes, incident_id=1)
        messages[name] = str(caught.value)
        with pytest.raises(InvalidJobChanges) as direct:
            backend.update_job(job_id, changes) if not changes.env else backend.resubmit(job_id, changes)
        assert str(direct.value) == messages[name]
    assert messages["demo"] == messages["slurm"] and messages["demo"].startswith("job changes refused: ")
    assert demo.actions() == []  # nothing was done on either side
    assert _field(slurm_cluster, held_job, "Reason") == "JobHeldUser"
    assert _field(slurm_cluster, held_job, "Restarts") == "0"
