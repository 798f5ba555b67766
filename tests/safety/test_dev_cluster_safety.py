"""Issue #6 acceptance on the real dev cluster (Slurm + sshd + Prefect server + SMTP receiver).

Slurm state is always read back with scontrol, never through Pitstop's adapter.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone

import pytest

from pitstop.store.tables import ActionRecord, Breaker, Incident, NodeRecord, XidEvent
from tests.flows.conftest import rows, wait_for
from tests.safety.conftest import (
    FIXTURES,
    hand_drain,
    node_state,
    pitstop_cli,
    scontrol_field,
    slurm_snapshot,
)

pytestmark = [pytest.mark.cluster, pytest.mark.prefect, pytest.mark.slow]

XID_JOB = """#!/bin/sh
echo "step 1200 loss 2.31"
echo "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus." >&2
exit 1
"""
HUMAN_REASON = "hand: swapping DIMM B3, ticket OPS-4711 (alice)"
# operator rules for alarms the tests raise: a check that clears after diagnostics, a burst
SELF_TEST_RULES = [
    {"cause": "node_failure", "signature": "test-selfcheck", "description": "dev-cluster: drain, diag, resume",
     "actions": ["drain", {"diag": {"level": 1}}, {"resume": {"after_diag_passes": True}}, "notify_ops"]},
    {"cause": "node_failure", "signature": "test-burst", "description": "dev-cluster: drain only",
     "actions": ["drain", "notify_ops"]},
]
ROOMY_BLAST = {"blast_radius": {"max_partition_percent": 100, "max_nodes_per_hour": 10}}


def _failed_xid_job(slurm, node: str) -> tuple[str, dict]:
    job_id = slurm.submit("-J", "pitstop-safety-xid", "-N1", "-w", node, "-o", "safety-%j.out", script=XID_JOB)
    slurm.wait_state(job_id, "FAILED", timeout_s=90)
    end = scontrol_field(slurm, "job", job_id, "EndTime")
    facts = {"job_id": job_id, "state": "FAILED", "exit_code": 1,
             "end_time": datetime.fromisoformat(end).replace(tzinfo=timezone.utc).isoformat()}
    return job_id, facts


def _journal(incident_id: int) -> dict[str, ActionRecord]:
    return {f"{a.kind}:{a.target}": a for a in rows(ActionRecord) if a.incident_id == incident_id}


# --- a. ownership ---------------------------------------------------------------------------


def test_a_hand_drain_is_never_touched_and_a_pitstop_drain_resumes_after_diag(prefect_server, dev, policy_file, mailbox):
    from flows.health_sweep import health_sweep
    from flows.node_alarm import node_alarm
    from flows.post_failure import post_failure

    policy_file(SELF_TEST_RULES, **ROOMY_BLAST)
    slurm = dev
    human, mine = "gpu04", "gpu03"
    job_id, facts = _failed_xid_job(slurm, human)
    hand_drain(slurm, human, HUMAN_REASON)
    held = node_state(slurm, human)
    assert "DRAIN" in held[0] and held[1] == HUMAN_REASON

    pf = post_failure(job_id, facts=facts)
    assert pf.status == "done" and pf.verdict.signature == "xid-79"
    assert node_state(slurm, human) == held  # not re-drained, reason untouched
    lines = {f"{a.kind} {a.target}": a for a in pf.actions}
    assert lines[f"drain {human}"].state == "skipped" and "someone else" in lines[f"drain {human}"].detail
    assert any(f"{human} is drained by someone else" in e for e in pf.explain)

    na = node_alarm(human, "health_check_failed", {"key": "safety-a-human"})
    assert na.status == "done"
    assert node_state(slurm, human) == held
    touched = [a for a in na.actions if a.target == human and a.state not in {"skipped"}]
    assert touched == [], touched  # every node step was refused: information, not an order

    sweep = health_sweep()
    assert human in sweep.skipped and "someone else" in sweep.skipped[human]
    assert node_state(slurm, human) == held

    # a drain Pitstop makes is its own to undo, once its diagnostics pass (node-check over SSH)
    ok = node_alarm(mine, "selfcheck", {"cause": "node_failure", "signature": "test-selfcheck", "key": "safety-a-mine"})
    journal = _journal(ok.incident_id)
    assert journal[f"drain:{mine}"].state == "done"
    assert f"incident={ok.incident_id}" in journal[f"drain:{mine}"].result
    assert journal[f"diag:{mine}"].state == "done" and "node check OK" in journal[f"diag:{mine}"].result
    assert journal[f"resume:{mine}"].state == "done", journal[f"resume:{mine}"].result
    assert "DRAIN" not in node_state(slurm, mine)[0]
    assert node_state(slurm, human) == held  # still, at the end of everything
    [rec] = [n for n in rows(NodeRecord) if n.name == human]
    assert rec.drain_owner == "foreign"


# --- b. storm guard -------------------------------------------------------------------------


def test_b_burst_on_3_of_4_drains_2_opens_the_breaker_asks_and_waits_for_reset(prefect_server, dev, policy_file, mailbox):
    from flows.node_alarm import node_alarm

    policy_file(SELF_TEST_RULES, storm_guard={"partition_max_percent": 50, "cluster_max_percent": 50,
                                              "min_healthy_nodes": 1}, **ROOMY_BLAST)
    slurm = dev
    burst = {"cause": "node_failure", "signature": "test-burst"}
    reports = [node_alarm(n, "burst", {**burst, "key": f"safety-b-{n}"}) for n in ("gpu01", "gpu02", "gpu03")]
    drained = sorted(n for n in slurm.nodes if "DRAIN" in node_state(slurm, n)[0])
    assert drained == ["gpu01", "gpu02"], {n: node_state(slurm, n) for n in slurm.nodes}
    third = {a.kind: a for a in reports[2].actions}
    assert third["drain"].state == "denied"  # asked; nobody answered within the timeout
    assert any(e.startswith("BREAKER OPENED") for e in reports[2].explain)
    assert {b.scope for b in rows(Breaker) if b.is_open} == {"cluster", "partition:gpu"}
    status = pitstop_cli("breaker", "status")
    assert status.returncode == 0 and "partition:gpu" in status.stdout, status.stdout + status.stderr
    asks = [i for i, s in enumerate(mailbox.subjects()) if s.startswith("APPROVAL NEEDED") and "gpu03" in s]
    assert asks and "BREAKER OPENED" in mailbox.body(asks[0])

    # while open, nothing more drains, on any node
    more = node_alarm("gpu04", "burst", {**burst, "key": "safety-b-gpu04"})
    assert {a.kind: a.state for a in more.actions}["drain"] == "denied"
    assert "DRAIN" not in node_state(slurm, "gpu04")[0] and "DRAIN" not in node_state(slurm, "gpu03")[0]

    reset = pitstop_cli("breaker", "reset", "-m", "storm understood: bad PDU on rack 3")
    assert reset.returncode == 0, reset.stderr
    assert not any(b.is_open for b in rows(Breaker))
    after = node_alarm("gpu03", "burst", {**burst, "key": "safety-b-gpu03-after-reset"})
    assert {a.kind: a.state for a in after.actions}["drain"] == "done"
    assert "DRAIN" in node_state(slurm, "gpu03")[0]


# --- c. Xid counting, ladder, damping -------------------------------------------------------


def test_c_xid_counted_once_over_five_sweeps_second_79_climbs_ladder_94_is_damped(prefect_server, dev, policy_file, mailbox, tmp_path, monkeypatch):
    from flows.health_sweep import health_sweep
    from flows.node_alarm import node_alarm

    policy_file(**ROOMY_BLAST)
    slurm = dev
    dmesg = tmp_path / "dmesg.txt"  # every dev-cluster "node" is this host: each reads this log
    shutil.copy(FIXTURES / "dmesg_xid79.txt", dmesg)
    monkeypatch.setenv("PITSTOP_PIPELINE__KERNEL_LOG_ARGV", json.dumps(["cat", str(dmesg)]))

    sweeps = [health_sweep() for _ in range(5)]
    assert [len(s.xid_alarms) for s in sweeps] == [len(slurm.nodes), 0, 0, 0, 0]
    events = rows(XidEvent)
    assert sorted(e.node for e in events) == sorted(slurm.nodes) and {e.xid for e in events} == {79}
    assert {n.name: n.xid_counts for n in rows(NodeRecord)}["gpu01"] == {"79": 1}

    first = next(a for a in sweeps[0].xid_alarms if a.node == "gpu01")
    r1 = node_alarm(first.node, first.alarm, first.details)
    assert r1.verdict.signature == "xid-79"
    # Xid 79 is NVIDIA RESTART_BM: the reboot ladder; after the reboot the node check passes (its
    # Xid was counted by the sweeps already), so the node is back in service.
    assert any("reboot rung 1/3 (reboot)" in e for e in r1.explain), r1.explain
    assert "gpu01: back in service after passing its checks" in r1.explain

    dmesg.write_text(dmesg.read_text() + (FIXTURES / "second_xid79.txt").read_text())
    second = next(a for a in health_sweep().xid_alarms if a.node == "gpu01")
    assert second.details["key"] != first.details["key"]
    r2 = node_alarm(second.node, second.alarm, second.details)
    # The second Xid 79 in the window starts at rung 2 (DCGM level 3). No DCGM here and the quick
    # check passes: nothing proves the node bad or good, so no RMA ticket - it stays out, handed
    # to a person (the policy's handover_to), and `pitstop nodes` says so.
    assert any("reboot rung 2/3 (diag level 3)" in e for e in r2.explain), r2.explain
    assert not any("rma_ticket" in e for e in r2.explain), r2.explain
    assert "gpu01: stays drained, handed to ops: diagnostics level 3 could not run there (no DCGM)" in r2.explain
    assert "DRAIN" in node_state(slurm, "gpu01")[0]
    [rec] = [n for n in rows(NodeRecord) if n.name == "gpu01"]
    assert (rec.ladder, rec.ladder_rung) == ("reboot", 1)
    nodes = pitstop_cli("nodes")
    assert nodes.returncode == 0 and "reboot 2" in nodes.stdout and "handed to ops" in nodes.stdout, nodes.stdout + nodes.stderr
    mails = [i for i, s in enumerate(mailbox.subjects()) if "node gpu01" in s and "APPROVAL" not in s]
    assert "reboot rung 2/3 (diag level 3)" in mailbox.body(mails[-1])

    # one contained Xid 94 on gpu02: below its threshold (3 in 60 min), nothing is done
    dmesg.write_text(dmesg.read_text() + (FIXTURES / "xid94.txt").read_text())
    before = node_state(slurm, "gpu02")
    alarm94 = next(a for a in health_sweep().xid_alarms if a.node == "gpu02" and a.alarm == "xid-94")
    r3 = node_alarm(alarm94.node, alarm94.alarm, alarm94.details)
    assert [a.kind for a in r3.actions] == ["none"], r3.actions
    assert any("1 of 3 occurrences" in e and "below" in e for e in r3.explain), r3.explain
    assert node_state(slurm, "gpu02") == before


# --- d. observe mode ------------------------------------------------------------------------


def test_d_observe_mode_changes_nothing_in_slurm_but_records_and_tells(prefect_server, dev, policy_file, mailbox):
    from flows.node_alarm import node_alarm
    from flows.post_failure import post_failure

    policy_file(**ROOMY_BLAST)
    slurm = dev
    job_id, facts = _failed_xid_job(slurm, "gpu02")
    switched = pitstop_cli("mode", "observe")  # at run time, over the settings' `act`
    assert switched.returncode == 0 and "observe" in switched.stdout, switched.stderr
    before = slurm_snapshot(slurm, [job_id])

    pf = post_failure(job_id, facts=facts)
    na = node_alarm("gpu02", "xid-79", {"cause": "gpu_hardware", "signature": "xid-79", "key": "safety-d"})

    assert slurm_snapshot(slurm, [job_id]) == before
    for report in (pf, na):
        assert report.status == "done"
        states = {a.kind: a.state for a in report.actions}
        assert states["drain"] == "would_do", report.actions
        assert "mode: observe" in report.explain
    assert {a.kind: a.state for a in pf.actions}["requeue"] == "would_do"
    recorded = [a for a in rows(ActionRecord) if a.kind in {"drain", "requeue", "resume", "gpu_reset"}]
    assert recorded and all(a.state in {"would_do", "skipped"} for a in recorded), [(a.kind, a.state) for a in recorded]
    assert {i.status for i in rows(Incident)} == {"done"}
    mails = wait_for(lambda: [m for m in mailbox.messages if "gpu02" in str(m["subject"]) or job_id in str(m["subject"])], 20, "notifications")
    bodies = [mailbox.body(mailbox.messages.index(m)) for m in mails]
    assert all("Mode: observe" in b for b in bodies)
    assert any("drain gpu02: would do" in b for b in bodies), bodies[0]
