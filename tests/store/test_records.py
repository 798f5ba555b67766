"""Records on a real SQLite file: idempotent incidents, the journal, Xid watermark, breakers, mode."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from pitstop.cluster.base import NodeInfo
from pitstop.config import Mode
from pitstop.models import Cause, Verdict
from pitstop.policy import ModeState, decide, load_policy
from pitstop.store import Store
from pitstop.store import records as r

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
END = datetime(2025, 3, 1, 11, 58, 7, tzinfo=timezone.utc)
XID79 = Verdict(cause=Cause.GPU_HARDWARE, signature="xid-79", confidence=0.95)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path}/x.db")
    yield s
    s.dispose()


def test_same_job_event_twice_is_one_incident(store: Store) -> None:
    a, created_a = r.create_job_incident(store, cluster="c", job_id="42", end_time=END, verdict=XID79, nodes=["n1"])
    b, created_b = r.create_job_incident(store, cluster="c", job_id="42", end_time=END.astimezone(
        timezone(timedelta(hours=2))), verdict=XID79)  # same instant, other zone
    assert created_a and not created_b and a.id == b.id
    c, created_c = r.create_job_incident(store, cluster="c", job_id="42", end_time=END + timedelta(hours=1), verdict=XID79)
    assert created_c and c.id != a.id  # a requeued run that failed again is a new incident
    n1, new1 = r.create_node_incident(store, cluster="c", node="n1", alarm_id="evt-1", verdict=XID79)
    n2, new2 = r.create_node_incident(store, cluster="c", node="n1", alarm_id="evt-1", verdict=XID79)
    assert new1 and not new2 and n1.id == n2.id


def test_two_threads_one_incident(store: Store) -> None:
    barrier = threading.Barrier(2)
    results: list[tuple[int, bool]] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            barrier.wait()
            inc, created = r.create_job_incident(store, cluster="c", job_id="7", end_time=END, verdict=XID79)
            results.append((inc.id, created))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert len({i for i, _ in results}) == 1 and sorted(c for _, c in results) == [False, True]
    assert len(r.recent_incidents(store, cluster="c")) == 1


def test_journal_resumes_without_repeating_finished_actions(store: Store) -> None:
    inc, _ = r.create_job_incident(store, cluster="c", job_id="42", end_time=END, verdict=XID79, nodes=["n1"])
    from pitstop.cluster.base import JobRecord

    job = JobRecord(job_id="42", user="alice", partition="gpu", state="FAILED", nodes=["n1"])
    d = decide(XID79, policy=load_policy(), history=r.load_history(store, cluster="c", now=NOW, signature="xid-79",
               job_id="42", nodes=["n1"], exclude_incident_id=inc.id), mode=ModeState(mode=Mode.ACT),
               now=NOW, incident_id=inc.id, job=job, nodes={"n1": NodeInfo(name="n1", state="IDLE", partitions=["gpu"])})
    r.save_decision(store, inc.id, d.model_dump(mode="json"), status="acting")
    rows = r.plan_actions(store, inc.id, d.actions)
    assert [x.seq for x in rows] == list(range(len(d.actions)))
    assert rows[0].kind == "drain" and rows[0].params["reason"] == f"pitstop: gpu_hardware xid-79 incident={inc.id}"
    # First run: drain done, requeue started, then the flow "crashes".
    assert r.start_action(store, inc.id, 0) and r.finish_action(store, inc.id, 0, "done", "drained")
    assert r.start_action(store, inc.id, 1)
    # Re-run: re-planning keeps the journal; the drain is not offered again, the requeue is.
    again = r.plan_actions(store, inc.id, d.actions)
    assert [x.state for x in again][:2] == ["done", "running"]
    todo = r.actions_to_run(store, inc.id)
    assert 0 not in [x.seq for x in todo] and todo[0].seq == 1
    assert not r.start_action(store, inc.id, 0)  # a finished action cannot be claimed
    assert not r.finish_action(store, inc.id, 0, "failed", "late")  # nor overwritten
    assert r.journal(store, inc.id)[0].result == "drained"
    with pytest.raises(r.RecordError, match="finished state"):
        r.finish_action(store, inc.id, 1, "running")
    assert r.get_incident(store, inc.id).decision["rule"] == "gpu_hardware:xid-79 (NVIDIA RESTART_BM)"


def test_approval_resolution(store: Store) -> None:
    inc, _ = r.create_node_incident(store, cluster="c", node="n1", alarm_id="a", verdict=XID79)
    r.plan_actions(store, inc.id, [r.ActionIntent(seq=0, kind="rma_ticket", target="n1", state="awaiting_approval"),
                                   r.ActionIntent(seq=1, kind="reboot", target="n1", state="awaiting_approval")])
    assert not r.start_action(store, inc.id, 0)  # must be approved first
    assert r.resolve_approval(store, inc.id, 0, approved=True, comment="ok", by="ops")
    assert r.start_action(store, inc.id, 0)
    assert r.resolve_approval(store, inc.id, 1, approved=False, comment="timeout")
    assert not r.resolve_approval(store, inc.id, 1, approved=True)
    assert [x.state for x in r.journal(store, inc.id)] == ["running", "denied"]


def test_same_xid_line_seen_by_five_sweeps_counts_once(store: Store) -> None:
    line = "[ 8123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."
    obs = r.XidObservation(xid=79, kernel_ts=8123.456789, boot_id="b1", pci="0000:3b:00", line=line)
    counts = [r.record_xids(store, "c", "n1", [obs]) for _ in range(5)]
    assert [len(c.new) for c in counts] == [1, 0, 0, 0, 0]
    assert counts[-1].counts == {"79": 1}
    # A later line in the same boot counts; an old line rescanned with a new one does not.
    later = obs.model_copy(update={"kernel_ts": 9000.0})
    res = r.record_xids(store, "c", "n1", [obs, later])
    assert [o.kernel_ts for o in res.new] == [9000.0] and res.counts == {"79": 2}
    # After a reboot timestamps restart low: still counted (new boot id).
    boot2 = obs.model_copy(update={"boot_id": "b2", "kernel_ts": 12.5})
    assert len(r.record_xids(store, "c", "n1", [boot2]).new) == 1
    # Without a boot id the unique key still stops double counting.
    anon = r.XidObservation(xid=94, kernel_ts=50.0, line="x")
    assert [len(r.record_xids(store, "c", "n2", [anon]).new) for _ in range(3)] == [1, 0, 0]
    assert len(r.xid_history(store, "c", "n1")) == 3
    assert r.list_nodes(store, "c")[0].xid_counts == {"79": 3}


def test_node_state_history_and_ladder_and_lemon(store: Store) -> None:
    assert r.record_node_state(store, "c", "n1", state="IDLE")
    assert not r.record_node_state(store, "c", "n1", state="IDLE")  # unchanged: no new event
    assert r.record_node_state(store, "c", "n1", state="DRAIN", reason="pitstop: x y incident=1", owner="pitstop",
                               incident_id=1)
    r.set_node_ladder(store, "c", "n1", "reset_gpu", 1, incident_id=1)
    r.set_node_lemon(store, "c", "n1", ["6 distinct failed jobs"])
    node = r.list_nodes(store, "c")[0]
    assert (node.drain_owner, node.ladder_rung, node.lemon) == ("pitstop", 1, True)
    assert [e.kind for e in r.node_events(store, "c", "n1")] == ["lemon", "ladder", "state", "state"]


def test_tickets_are_idempotent(store: Store) -> None:
    inc, _ = r.create_node_incident(store, cluster="c", node="n1", alarm_id="a", verdict=XID79)
    draft = r.TicketDraft(cluster="c", node="n1", incident_id=inc.id, gpu_uuid="GPU-1234", pci_bus="0000:3b:00.0",
                          xid_history=[{"xid": 79}], dcgm_results={"level": 3, "result": "FAIL"})
    t1, new1 = r.create_ticket(store, draft)
    t2, new2 = r.create_ticket(store, draft)
    assert new1 and not new2 and t1.id == t2.id
    r.update_ticket(store, t1.id, "sent", sink_result="HTTP 200")
    assert r.tickets_for(store, "c", "n1")[0].status == "sent"


def test_breaker_stays_open_until_a_human_resets_it(store: Store) -> None:
    assert r.open_breaker(store, "partition:gpu", "storm guard: 3 of 4")
    assert not r.open_breaker(store, "partition:gpu", "again")  # already open: no new alarm
    assert r.open_breakers(store) == {"partition:gpu": "storm guard: 3 of 4"}
    assert r.reset_breaker(store, "partition:gpu", by="bob", comment="fixed the PDU")
    assert not r.reset_breaker(store, "partition:gpu", by="bob")
    assert r.open_breakers(store) == {}
    b = r.breakers(store)[0]
    assert (b.trips, b.reset_by) == (2, "bob")


def test_mode_switch_at_run_time(store: Store) -> None:
    assert r.get_mode(store).mode is Mode.OBSERVE  # a new installation observes
    assert r.get_mode(store, default=Mode.ACT).mode is Mode.ACT
    r.set_mode(store, "canary", by="bob", canary_partitions=["canary"])
    m = r.get_mode(store, default=Mode.ACT)
    assert (m.mode, m.canary_partitions, m.updated_by) == (Mode.CANARY, ["canary"], "bob")
    # Another process (another Store on the same file) sees it without restarting anything.
    other = Store(store.url)
    assert r.get_mode(other).mode is Mode.CANARY
    other.dispose()


def test_corrupt_mode_value_falls_back_to_default(store: Store) -> None:
    from pitstop.store.tables import RuntimeSetting

    with store.session() as s:
        s.add(RuntimeSetting(key=r.MODE_KEY, value={"mode": "yolo"}))
        s.commit()
    assert r.get_mode(store, default=Mode.OBSERVE).mode is Mode.OBSERVE


def test_load_history_counts_from_the_store(store: Store) -> None:
    infos = [NodeInfo(name=f"n{i}", state="IDLE", partitions=["gpu"]) for i in range(1, 5)]
    infos[3] = NodeInfo(name="n4", state="IDLE", flags=["DRAIN"], reason="bob's", partitions=["gpu"])
    first, _ = r.create_job_incident(store, cluster="c", job_id="42", end_time=END, verdict=XID79, nodes=["n1"])
    r.plan_actions(store, first.id, [r.ActionIntent(seq=0, kind="drain", target="n1")])
    r.start_action(store, first.id, 0)
    r.finish_action(store, first.id, 0, "done", now=NOW - timedelta(minutes=5))
    second, _ = r.create_job_incident(store, cluster="c", job_id="42", end_time=END + timedelta(hours=1),
                                      verdict=XID79, nodes=["n1"])
    r.create_job_incident(store, cluster="other", job_id="42", end_time=END, verdict=XID79, nodes=["n1"])
    r.open_breaker(store, "cluster", "test")
    h = r.load_history(store, cluster="c", now=NOW, signature="xid-79", job_id="42", nodes=["n1"],
                       cluster_nodes=infos, exclude_incident_id=second.id)
    assert h.job_same_failures == 1
    assert [i.id for i in h.node_incidents["n1"]] == [first.id]
    assert h.node_incidents["n1"][0].at.tzinfo is None or h.node_incidents["n1"][0].at.tzinfo
    assert [d.node for d in h.recent_drains] == ["n1"] and h.recent_drains[0].partitions == ["gpu"]
    assert h.partitions["gpu"].size == 4 and h.partitions["gpu"].healthy == 3
    assert h.lemon_signals["n1"].distinct_failed_jobs == 1
    assert h.open_breakers == {"cluster": "test"}


def test_concurrent_sweeps_count_an_xid_once(store: Store) -> None:
    obs = [r.XidObservation(xid=79, kernel_ts=100.0 + i, boot_id="b1", pci="0000:3b:00") for i in range(5)]
    barrier = threading.Barrier(3)
    out: list[int] = []
    errors: list[BaseException] = []

    def sweep() -> None:
        try:
            barrier.wait()
            out.append(len(r.record_xids(store, "c", "fresh", obs).new))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=sweep) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert sum(out) == 5
    assert r.list_nodes(store, "c")[0].xid_counts == {"79": 5}


def test_history_blames_only_the_nodes_an_incident_held_at_fault(store: Store) -> None:
    """A multi-node job's incident counts on the nodes its decision blamed, not on every node of
    the job; and a same-signature failure on a node the requeue excluded since is not a repeat."""
    first, _ = r.create_job_incident(store, cluster="c", job_id="7", end_time=END, verdict=XID79,
                                     nodes=["n1", "n2", "n3", "n4"])
    r.save_decision(store, first.id, {"faulty_nodes": ["n2"]})
    unblamed, _ = r.create_job_incident(store, cluster="c", job_id="8", end_time=END, verdict=XID79,
                                        nodes=["n1", "n3"])  # no decision saved, two nodes: nobody
    h = r.load_history(store, cluster="c", now=NOW, signature="xid-79", job_id="7", nodes=["n1", "n3", "n4", "n5"])
    assert h.node_incidents["n1"] == [] and h.lemon_signals["n1"].node_faults == 0
    assert h.job_same_failures == 0  # n2 was excluded: the job now runs on n1, n3-n5
    h = r.load_history(store, cluster="c", now=NOW, signature="xid-79", job_id="7", nodes=["n2", "n3"])
    assert [i.id for i in h.node_incidents["n2"]] == [first.id] and h.job_same_failures == 1
    assert unblamed.id not in {i.id for lst in h.node_incidents.values() for i in lst}
