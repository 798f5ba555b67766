"""The demo cluster: deterministic faults, state shared across instances, real-format lines."""

from __future__ import annotations

import pytest

from pitstop.cluster.base import HostStatus, JobChanges, NotFound
from pitstop.cluster.demo import DemoCluster


def test_same_seed_same_faults(tmp_path):
    a = DemoCluster.create(tmp_path / "a", seed=11).inject_faults(5)
    b = DemoCluster.create(tmp_path / "b", seed=11).inject_faults(5)
    assert [(f.fault, f.nodes) for f in a] == [(f.fault, f.nodes) for f in b]


def test_xid_fault_writes_real_format_lines_and_survives_reopen(tmp_path):
    cluster = DemoCluster.create(tmp_path / "c", seed=1)
    [fault] = cluster.inject_faults(1, kinds=["gpu_fell_off_bus"])
    reopened = DemoCluster(tmp_path / "c")  # a second process would do exactly this
    job = reopened.job(fault.job_id)
    assert job.state == "FAILED" and job.nodes == fault.nodes
    kernel = reopened.run(fault.nodes[0], ["journalctl", "-k"])
    assert kernel.status is HostStatus.OK
    assert "NVRM: Xid (PCI:" in kernel.stdout and "): 79, pid=" in kernel.stdout
    check = reopened.run(fault.nodes[0], ["pitstop", "node-check", "--json"])
    assert '"overall":"FAIL"' in check.stdout.replace(" ", "")


def test_changes_are_logged_and_unknown_things_fail_clearly(tmp_path):
    cluster = DemoCluster.create(tmp_path / "d", seed=2)
    [fault] = cluster.inject_faults(1, kinds=["software_bug"])
    cluster.drain("gpu01", "pitstop: test")
    cluster.requeue(fault.job_id)
    cluster.update_job(fault.job_id, JobChanges(exclude_nodes=["gpu01"]))
    assert [a.op for a in DemoCluster(tmp_path / "d").actions()] == ["drain", "requeue", "update_job"]
    assert cluster.job(fault.job_id).restart_count == 1
    with pytest.raises(NotFound):
        cluster.node("gpu99")
    assert cluster.run("gpu01", ["rm", "-rf", "/"]).status is HostStatus.ERROR
    (tmp_path / "d" / "cluster.json").write_bytes(b"\xff\xfe not json")
    with pytest.raises(Exception, match="corrupt"):
        cluster.nodes()
