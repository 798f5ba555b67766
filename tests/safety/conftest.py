"""Safety acceptance on the real dev cluster: Slurm + sshd (as root, so this checkout's
`pitstop node-check` really runs on the nodes), the session's Prefect server, a real SMTP
receiver. Every test leaves the cluster as it found it: nodes resumed, jobs cancelled."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.cluster.conftest import dev_cluster_env, slurm_cluster, sshd  # noqa: F401  (session fixtures)
from tests.flows.conftest import DEFAULT_POLICY, mailbox  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parents[2]
PITSTOP_BIN = Path(sys.executable).with_name("pitstop")
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "safety"

# The sweep's node check: no `xid` (the store counts Xids, tasks/xids.py) and nothing that needs
# hardware this machine lacks (those report UNAVAILABLE, which is not a verdict on the node).
NODE_CHECK_ARGV = [str(PITSTOP_BIN), "node-check", "--json", "--checks", "nvml,ib,disk"]


def scontrol_field(slurm, kind: str, name: str, field: str) -> str:
    out = slurm.slurm("scontrol", "-o", "show", kind, name)
    end = r"(?= \[)" if field == "Reason" else r"(?=\s\w+=|$)"
    match = re.search(rf"(?:^|\s){field}=(.*?){end}", out.strip())
    return match.group(1) if match else ""


def node_state(slurm, node: str) -> tuple[str, str]:
    """(State, Reason) as scontrol prints them: read back from Slurm, not through the adapter."""
    return scontrol_field(slurm, "node", node, "State"), scontrol_field(slurm, "node", node, "Reason")


def slurm_snapshot(slurm, job_ids=()) -> dict:
    nodes = {n: node_state(slurm, n) for n in slurm.nodes}
    jobs = {j: tuple(scontrol_field(slurm, "job", j, f) for f in ("JobState", "Restarts", "ExcNodeList", "TimeLimit"))
            for j in job_ids}
    return {"nodes": nodes, "jobs": jobs}


def hand_drain(slurm, node: str, reason: str) -> None:
    slurm.slurm("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")


def resume(slurm, node: str) -> None:
    slurm.slurm("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)


def pitstop_cli(*args: str) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "COLUMNS": "200"}  # rich wraps tables to 80 columns without a terminal
    return subprocess.run([str(PITSTOP_BIN), *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture
def policy_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An operator's policy: the built-in one with extra rules first and limits overridden."""
    def apply(first_rules: list[dict] | None = None, **overrides) -> Path:
        data = yaml.safe_load(DEFAULT_POLICY.read_text())
        data["rules"] = list(first_rules or []) + data["rules"]
        for key, value in overrides.items():
            data[key] = {**data[key], **value} if isinstance(data.get(key), dict) else value
        path = tmp_path / "policy.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        monkeypatch.setenv("PITSTOP_POLICY__FILE", str(path))
        return path

    return apply


@pytest.fixture
def dev(slurm_cluster, sshd, mailbox, monkeypatch, tmp_path):  # noqa: F811
    """Settings for the flows on the dev cluster; restores every node state at the end."""
    before = {n: node_state(slurm_cluster, n) for n in slurm_cluster.nodes}
    assert all("DRAIN" not in s for s, _ in before.values()), f"dev cluster not clean at start: {before}"
    monkeypatch.setenv("PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S", "3")  # no answer = deny, quickly
    monkeypatch.setenv("PITSTOP_CLUSTER", "slurm")
    monkeypatch.setenv("PITSTOP_PIPELINE__REBOOT_WAIT_S", "0")  # the dev cluster's RebootProgram is /bin/true: a reboot never completes, so do not wait for it
    monkeypatch.setenv("PITSTOP_MODE", "act")
    monkeypatch.setenv("PITSTOP_SLURM__CONF_PATH", str(slurm_cluster.conf_path))
    monkeypatch.setenv("PITSTOP_SLURM__CLUSTER_NAME", "devcluster")
    for key, value in {"USER": "root", "KEY_FILE": sshd.client_key, "KNOWN_HOSTS": sshd.known_hosts,
                       "PORT": sshd.port, "CONNECT_TIMEOUT_S": 5}.items():
        monkeypatch.setenv(f"PITSTOP_SSH__{key}", str(value))
    monkeypatch.setenv("PITSTOP_SSH__ADDRESSES", json.dumps(sshd.addresses))
    monkeypatch.setenv("PITSTOP_PIPELINE__NODE_CHECK_ARGV", json.dumps(NODE_CHECK_ARGV))
    empty = tmp_path / "empty-dmesg.txt"
    empty.write_text("")
    monkeypatch.setenv("PITSTOP_PIPELINE__KERNEL_LOG_ARGV", json.dumps(["cat", str(empty)]))
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf_path))  # for `pitstop` subprocesses
    yield slurm_cluster
    for job in slurm_cluster.slurm("squeue", "-h", "-o", "%i %j", check=False).splitlines():
        job_id, _, name = job.partition(" ")
        if name.startswith("pitstop-safety"):
            slurm_cluster.cancel(job_id)
    for n in slurm_cluster.nodes:
        resume(slurm_cluster, n)
