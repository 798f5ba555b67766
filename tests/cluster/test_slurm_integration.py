"""SlurmScheduler against the real dev cluster: jobs that succeed, fail and are killed; node
drain/resume/reboot; requeue, requeue-hold, update and resubmit, each read back from Slurm."""

from __future__ import annotations

import time

import pytest

from pitstop.cluster.base import ClusterError, InvalidIdentifier, JobChanges, NotFound, Scheduler

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def sched(slurm_cluster):
    return slurm_cluster.scheduler()


def test_finished_jobs_read_back(slurm_cluster, sched, timelimit_job) -> None:
    assert isinstance(sched, Scheduler)
    ok = slurm_cluster.submit("-J", "t-ok", "--gres=gpu:2", "-o", "ok-%j.out",
                              "--wrap", "echo CVD=$CUDA_VISIBLE_DEVICES")
    fail = slurm_cluster.submit("-J", "t-fail3", "-N2", "-o", "fail-%j.out", "--wrap", "exit 3")
    killed = slurm_cluster.submit("-J", "t-kill", "--wrap", "kill -9 $$")
    for job_id in (ok, fail, killed):
        slurm_cluster.wait_state(job_id, "COMPLETED", "FAILED")

    done = sched.job(ok)
    assert (done.state, done.exit_code, done.signal, done.name) == ("COMPLETED", 0, None, "t-ok")
    assert done.start_time and done.end_time and done.submit_time <= done.start_time
    assert done.stdout_path == f"{slurm_cluster.jobs_dir}/ok-{ok}.out"
    time.sleep(0.5)
    assert "CVD=0,1" in open(done.stdout_path).read()
    assert len(done.nodes) == 1 and done.nodes[0] in slurm_cluster.nodes

    failed = sched.job(fail)
    assert (failed.state, failed.exit_code, failed.signal) == ("FAILED", 3, None)
    assert len(failed.nodes) == 2 and failed.reason == "NonZeroExitCode"
    for _ in range(50):  # the submit line comes from slurmdbd, which hears of jobs a moment later
        if failed.submit_line:
            break
        time.sleep(0.2)
        failed = sched.job(fail)
    assert failed.submit_line and "exit 3" in failed.submit_line

    dead = sched.job(killed)
    assert (dead.state, dead.exit_code, dead.signal) == ("FAILED", None, 9)

    listed = {j.job_id: j for j in sched.jobs()}
    assert listed[fail].exit_code == 3 and listed[ok].state == "COMPLETED"
    assert sched.jobs(user="nobody-here") == []


def test_accounting_reads_the_same_facts(slurm_cluster, sched) -> None:
    job_id = slurm_cluster.submit("-J", "t-acct", "--wrap", "exit 3")
    slurm_cluster.wait_state(job_id, "FAILED")
    for _ in range(50):  # slurmctld hands the record to slurmdbd asynchronously, in pieces
        try:
            record = sched.accounting(job_id)
            if record.state == "FAILED" and record.submit_line:
                break
        except NotFound:
            pass
        time.sleep(0.2)
    assert (record.state, record.exit_code) == ("FAILED", 3)
    assert record.submit_line and "exit 3" in record.submit_line
    with pytest.raises(NotFound):
        sched.accounting("987654321")


def test_nodes_and_node(slurm_cluster, sched) -> None:
    nodes = {n.name: n for n in sched.nodes()}
    assert set(slurm_cluster.nodes) <= set(nodes)
    one = sched.node("gpu01")
    assert one.gres == "gpu:h100:8" and "gpu" in one.partitions and one.cpus == 8
    assert sched.nodes(partition="gpu") and sched.nodes(partition="no-such-partition") == []
    with pytest.raises(NotFound, match="nope"):
        sched.node("nope")
    with pytest.raises(InvalidIdentifier):
        sched.node("gpu01;reboot")
    with pytest.raises(NotFound):
        sched.job("987654321")
    with pytest.raises(InvalidIdentifier):
        sched.job("12 34")


def test_drain_and_resume_read_back(slurm_cluster, sched) -> None:
    try:
        sched.drain("gpu04", "pitstop test: xid 79 = GPU fell off the bus")
        node = sched.node("gpu04")
        assert node.is_drained and node.reason == "pitstop test: xid 79 = GPU fell off the bus"
        assert node.reason_user == "root" and node.reason_time is not None
        assert {n.name: n for n in sched.nodes()}["gpu04"].is_drained  # sinfo --json agrees
        with pytest.raises(ClusterError, match="one line"):
            sched.drain("gpu04", "two\nlines")
        with pytest.raises(ClusterError, match="required"):
            sched.drain("gpu04", "  ")
    finally:
        sched.resume("gpu04")
    assert not sched.node("gpu04").is_drained
    sched.resume("gpu04")  # resuming a healthy node is already done, not an error


def test_reboot_asap_while_busy(slurm_cluster, sched) -> None:
    job_id = slurm_cluster.submit("-J", "t-busy", "-w", "gpu03", "--wrap", "sleep 120")
    slurm_cluster.wait_state(job_id, "RUNNING")
    try:
        sched.reboot("gpu03", "pitstop test: reset GPU")
        node = sched.node("gpu03")
        assert "REBOOT_REQUESTED" in node.flags and node.is_drained
        assert node.reason == "pitstop test: reset GPU"
    finally:
        # the dev nodes cannot really reboot: take the request back before the node goes idle
        slurm_cluster.slurm("scontrol", "cancel_reboot", "gpu03", check=False)
        slurm_cluster.cancel(job_id)
        slurm_cluster.wait_state(job_id, "CANCELLED")
        sched.resume("gpu03")
    assert "REBOOT_REQUESTED" not in sched.node("gpu03").flags


def test_requeue_and_requeue_hold(slurm_cluster, sched) -> None:
    again = slurm_cluster.submit("-J", "t-rq", "-o", "rq-%j.out",
                                 "--wrap", "echo restart=${SLURM_RESTART_COUNT:-0}; sleep 120")
    held = slurm_cluster.submit("-J", "t-rqh", "--wrap", "sleep 120")
    try:
        slurm_cluster.wait_state(again, "RUNNING")
        slurm_cluster.wait_state(held, "RUNNING")
        sched.requeue(again)
        sched.requeue(held, hold=True)
        slurm_cluster.wait_state(held, "PENDING", timeout_s=30)  # after a brief COMPLETING
        record = sched.job(held)
        assert record.state == "PENDING" and record.reason == "job_requeued_in_held_state"
        assert record.restart_count == 1
        slurm_cluster.wait_state(again, "RUNNING", timeout_s=60)  # cred_expire=10: ~11 s
        assert sched.job(again).restart_count == 1
    finally:
        slurm_cluster.cancel(again, held)
    with pytest.raises(ClusterError):
        sched.requeue("987654321")


def test_update_pending_job(slurm_cluster, sched) -> None:
    job_id = slurm_cluster.submit("-J", "t-upd", "--hold", "--exclude=gpu04", "--wrap", "true")
    try:
        sched.update_job(job_id, JobChanges(exclude_nodes=["gpu01", "gpu02"], time_limit_min=5))
        record = sched.job(job_id)
        assert sorted(record.excluded_nodes) == ["gpu01", "gpu02", "gpu04"]
        assert record.time_limit_min == 5
        with pytest.raises(ClusterError, match="resubmit"):
            sched.update_job(job_id, JobChanges(env={"NCCL_DEBUG": "INFO"}))
        with pytest.raises(InvalidIdentifier):
            sched.update_job(job_id, JobChanges(exclude_nodes=["gpu01,gpu02"]))
        sched.update_job(job_id, JobChanges())  # nothing to change: no call, no error
    finally:
        slurm_cluster.cancel(job_id)


def test_resubmit_with_changed_config(slurm_cluster, sched) -> None:
    script = "#!/bin/sh\n#SBATCH -J t-resub\necho FOO=$FOO on $SLURMD_NODENAME\nexit 3\n"
    old = slurm_cluster.submit("-o", "resub-%j.out", "--time=3", script=script)
    slurm_cluster.wait_state(old, "FAILED")
    old_out = slurm_cluster.jobs_dir / f"resub-{old}.out"
    before = old_out.read_text()

    new = sched.resubmit(old, JobChanges(exclude_nodes=["gpu01", "gpu02", "gpu03"],
                                         time_limit_min=2, env={"FOO": "bar baz"}))
    assert new != old
    slurm_cluster.wait_state(new, "FAILED")
    record = sched.job(new)
    assert record.name == "t-resub" and record.time_limit_min == 2 and record.exit_code == 3
    assert sorted(record.excluded_nodes) == ["gpu01", "gpu02", "gpu03"] and record.nodes == ["gpu04"]
    time.sleep(0.5)
    assert (slurm_cluster.jobs_dir / f"resub-{new}.out").read_text() == "FOO=bar baz on gpu04\n"
    assert old_out.read_text() == before  # the first run's log is untouched
    assert sched.batch_script(new) == script


def test_unreachable_tools_give_clear_errors(slurm_cluster, tmp_path) -> None:
    from pitstop.cluster.slurm import SlurmScheduler
    from pitstop.config import SlurmSettings

    missing = SlurmScheduler(SlurmSettings(bin_dir=tmp_path))
    with pytest.raises(ClusterError, match="not found.*slurm-client"):
        missing.nodes()
    conf = tmp_path / "slurm.conf"
    conf.write_text(slurm_cluster.conf_path.read_text().replace("SlurmctldPort=", "SlurmctldPort=1"))
    dead = SlurmScheduler(SlurmSettings(conf_path=conf, command_timeout_s=3), env=slurm_cluster.env)
    started = time.monotonic()
    with pytest.raises(ClusterError, match="sinfo"):
        dead.nodes()
    assert time.monotonic() - started < 10


def test_topology_names_each_nodes_leaf_switch(slurm_cluster, sched) -> None:
    """The dev cluster's topology.conf (scripts/dev-cluster: two leaves under a spine), read back
    through slurmctld's `scontrol show topology`, as the switch-storm check reads it."""
    leaves = sched.topology()
    assert sorted(leaves) == ["leaf1", "leaf2"]
    assert sorted(n for members in leaves.values() for n in members) == sorted(slurm_cluster.nodes)
