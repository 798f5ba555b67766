"""Issue #5's whole chain on the real dev cluster, nothing called directly:

a job whose log carries an Xid 79 fails -> Slurm runs EpilogSlurmctld -> the make-wrapper hook in
$DIR/hooks/epilog_ctld.d/ runs `pitstop epilog` -> `pitstop.job.ended` reaches the session's real
Prefect server -> the automation schedules `post_failure` -> `pitstop up` (PITSTOP_CLUSTER=slurm,
PITSTOP_MODE=act) runs it -> the node is drained in Slurm with a reason naming the Xid, the job is
requeued excluding that node, the incident and its actions are in the DB, and a real SMTP
receiver gets the ops mail.

Slurm's state is read back with `scontrol`, not through Pitstop's adapter. The cluster is shared
by every test: the hook is removed, drained nodes resumed and the job cancelled at the end.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pitstop.processes import stop_process_group
from pitstop.store.tables import ActionRecord, Incident
from tests.cluster.conftest import dev_cluster_env, slurm_cluster, sshd  # noqa: F401  (fixtures)
from tests.flows.conftest import rows, wait_for, write_policy
from tests.support.net import Mailbox, smtp_receiver
from tests.triggers.conftest import PITSTOP_BIN, PrefectRest
from tests.triggers.test_slurm_hooks import install

pytestmark = [pytest.mark.cluster, pytest.mark.prefect, pytest.mark.slow]

NO_SWEEP_CRON = "0 0 1 1 *"  # the scheduled health sweep stays out of this test

# A training step dies with the driver's Xid 79; the requeued run (restart 1) succeeds.
JOB_SCRIPT = """#!/bin/sh
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then echo "resumed on $SLURMD_NODENAME"; exit 0; fi
echo "step 1200 loss 2.31"
echo "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus." >&2
echo "[rank3]: RuntimeError: CUDA error: unspecified launch failure" >&2
exit 1
"""

# The built-in storm guard trips on the first drain of 4 nodes (20 %); allow one out here.
SMALL_CLUSTER_LIMITS = {
    "blast_radius": {"max_partition_percent": 50, "max_nodes_per_hour": 4},
    "storm_guard": {"window_minutes": 60, "partition_max_drains": 8, "partition_max_percent": 75,
                    "cluster_max_drains": 8, "cluster_max_percent": 75, "min_healthy_nodes": 1},
}


def scontrol_field(slurm, kind: str, name: str, field: str) -> str:
    out = slurm.slurm("scontrol", "-o", "show", kind, name)
    # Reason is free text (it may hold "key=value") followed by " [user@time]"
    end = r"(?= \[)" if field == "Reason" else r"(?=\s\w+=|$)"
    match = re.search(rf"(?:^|\s){field}=(.*?){end}", out.strip())
    return match.group(1) if match else ""


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    with smtp_receiver() as box:
        yield box


@pytest.fixture
def served_on_slurm(warm_prefect, slurm_cluster, sshd, mailbox, isolated_home: Path,  # noqa: F811
                    tmp_path: Path) -> Iterator[dict]:
    """`pitstop up` against the session's server, acting on the dev cluster; SIGTERM at the end."""
    policy = write_policy(tmp_path / "policy.yaml", **SMALL_CLUSTER_LIMITS)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PITSTOP_")},
        "PITSTOP_HOME": str(isolated_home),
        "PITSTOP_CLUSTER": "slurm",
        "PITSTOP_PIPELINE__REBOOT_WAIT_S": "0",  # the dev cluster's RebootProgram is /bin/true: a reboot never completes, so do not wait for it
        "PITSTOP_MODE": "act",
        "PITSTOP_POLICY__FILE": str(policy),
        "PITSTOP_NOTIFY__URLS": json.dumps([mailbox.url]),
        "PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S": "3",  # an unexpected question fails fast
        "PITSTOP_PIPELINE__KERNEL_LOG_ARGV": json.dumps(["dmesg"]),
        "PITSTOP_SLURM__CONF_PATH": str(slurm_cluster.conf_path),
        "PITSTOP_SLURM__CLUSTER_NAME": "devcluster",
        "PITSTOP_SSH__USER": sshd.user,
        "PITSTOP_SSH__KEY_FILE": str(sshd.client_key),
        "PITSTOP_SSH__KNOWN_HOSTS": str(sshd.known_hosts),
        "PITSTOP_SSH__PORT": str(sshd.port),
        "PITSTOP_SSH__CONNECT_TIMEOUT_S": "5",
        "PITSTOP_SSH__ADDRESSES": json.dumps(sshd.addresses),
        "PITSTOP_TRIGGERS__HEALTH_SWEEP_CRON": NO_SWEEP_CRON,
        "PITSTOP_TRIGGERS__RUNNER_POLL_S": "1",
        "PITSTOP_TRIGGERS__FLUSH_INTERVAL_S": "1",
        # the automation path alone: a reconciler here would also answer other tests' events on
        # the shared server (tests/triggers/test_reconcile_prefect.py covers reconciliation)
        "PITSTOP_TRIGGERS__RECONCILE_INTERVAL_S": "0",
        "SLURM_CONF": str(slurm_cluster.conf_path),
        "PREFECT_API_URL": warm_prefect.api_url,
    }
    log_path = tmp_path / "pitstop-up.log"
    PrefectRest(warm_prefect.api_url).cancel_leftover_runs()  # another test's event is not ours to run
    with log_path.open("wb") as log:
        proc = subprocess.Popen([str(PITSTOP_BIN), "up"], env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    rest = PrefectRest(warm_prefect.api_url)
    try:
        deployment = None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            deployment = rest.deployment("post-failure", "post-failure")
            if b"ready: " in log_path.read_bytes() and deployment and any(
                a["name"].startswith("pitstop: pitstop.job.ended") for a in rest.automations()
            ):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"pitstop up did not get ready (exit {proc.poll()}):\n"
                        f"{log_path.read_text(errors='replace')[-3000:]}")
        time.sleep(1)  # the automation service picks up a new automation within a moment
        yield {"rest": rest, "deployment": deployment, "log": log_path, "api_url": warm_prefect.api_url}
    finally:
        stop_process_group(proc, grace_s=30)


def test_xid79_job_end_drains_requeues_records_and_mails_through_hook_and_automation(
    slurm_cluster, served_on_slurm, mailbox, isolated_home: Path  # noqa: F811
) -> None:
    slurm, rest, log = slurm_cluster, served_on_slurm["rest"], served_on_slurm["log"]
    started = time.monotonic()
    hook = slurm.hook_dir("epilog_ctld") / f"50-pitstop-chain-{uuid.uuid4().hex[:8]}"
    job_id = None
    drained: set[str] = set()

    def context() -> str:
        hooks_log = isolated_home / "log" / "hooks.log"
        return (f"\n--- hooks.log:\n{hooks_log.read_text()[-1500:] if hooks_log.exists() else '(none)'}"
                f"\n--- pitstop up:\n{log.read_text(errors='replace')[-4000:]}")

    def wait(predicate, timeout_s: float, what: str):
        """wait_for, with the hook log and `pitstop up`'s output as they are when it gives up."""
        try:
            return wait_for(predicate, timeout_s, what, interval=0.3)
        except AssertionError as exc:
            raise AssertionError(f"{exc}{context()}") from None

    try:
        # slurmctld (root) runs the hook; it shares PITSTOP_HOME with `pitstop up`
        install(hook, isolated_home, served_on_slurm["api_url"], slurm.conf_path)
        job_id = slurm.submit("-J", "pitstop-chain-xid79", "-N1", "-o", "chain-%j.out", script=JOB_SCRIPT)
        assert slurm.wait_state(job_id, "FAILED", timeout_s=60) == "FAILED"
        node = scontrol_field(slurm, "job", job_id, "NodeList")
        assert node in slurm.nodes
        drained.add(node)  # resumed in `finally` whatever happens

        # the automation turned the hook's event into exactly one post_failure run, and
        # `pitstop up` ran it to completion
        def runs() -> list[dict]:
            return [r for r in rest.flow_runs(served_on_slurm["deployment"]["id"])
                    if str(r["parameters"].get("job_id")) == job_id]

        [run] = wait(runs, 30, f"a post_failure run for job {job_id}")
        assert run["parameters"]["cluster"] == "devcluster"
        assert run["parameters"]["facts"]["hook"] == "EpilogSlurmctld"
        assert run["parameters"]["facts"]["exit_code"] == 1
        done = wait(lambda: [r for r in runs() if r["state_type"] in {"COMPLETED", "FAILED", "CRASHED"}],
                    60, f"post_failure for job {job_id} to finish")
        assert done[0]["state_type"] == "COMPLETED", f"post_failure ended {done[0]['state_type']}{context()}"
        assert f"fast lane: started flow run {run['id']}" in log.read_text(errors="replace")

        # Slurm itself shows the drain and its reason
        assert "DRAIN" in scontrol_field(slurm, "node", node, "State")
        # the Prefect server is shared by the session: an event another test emitted earlier can
        # reach this test's `pitstop up` too, so count the incidents of this job only
        incidents = [i for i in rows(Incident) if i.job_id == job_id]
        assert len(incidents) == 1, f"expected one incident for job {job_id}, got: " + "; ".join(
            f"{i.kind} job={i.job_id} node={i.node} end={i.end_time} {i.cause}/{i.signature} "
            f"key={getattr(i, 'idempotency_key', None)}" for i in incidents) + context()
        incident = incidents[0]
        reason = scontrol_field(slurm, "node", node, "Reason")
        assert "xid-79" in reason and f"incident={incident.id}" in reason, reason
        # requeued excluding the bad node; the next run lands elsewhere and succeeds
        assert scontrol_field(slurm, "job", job_id, "Restarts") == "1"
        assert node in scontrol_field(slurm, "job", job_id, "ExcNodeList")
        assert slurm.wait_state(job_id, "COMPLETED", timeout_s=60) == "COMPLETED"
        assert scontrol_field(slurm, "job", job_id, "NodeList") != node

        # the incident and its journal
        assert (incident.cluster, incident.job_id, incident.cause, incident.status) == (
            "devcluster", job_id, "gpu_hardware", "done")
        journal = {a.kind: a for a in rows(ActionRecord) if a.incident_id == incident.id}
        assert journal["drain"].state == "done" and journal["drain"].target == node
        assert journal["requeue"].state == "done" and journal["requeue"].target == job_id
        assert journal["notify_ops"].state == "done"

        # the real SMTP receiver got the ops notification, linking this flow run
        # (no GPU here, so the escalation reaches the RMA ticket, whose question is a mail of its own)
        mails = wait(lambda: [m for m in mailbox.messages if re.search(rf"\bjob {job_id}\b", str(m["subject"]))
                              and "APPROVAL" not in str(m["subject"])], 20, "the ops notification")
        assert "xid-79" in str(mails[0]["subject"])
        body = mailbox.body(mailbox.messages.index(mails[0]))
        assert "Xid (PCI:0000:3b:00): 79" in body
        assert f"drain {node}: done" in body and f"requeue {job_id}: done" in body
        assert f"/runs/flow-run/{run['id']}" in body
        print(f"job end -> remediated, mailed and requeued run completed: {time.monotonic() - started:.1f} s")
    finally:
        hook.unlink(missing_ok=True)
        if job_id:
            slurm.cancel(job_id)
        for name in drained:
            slurm.slurm("scontrol", "update", f"NodeName={name}", "State=RESUME", check=False)
