"""The store's metrics, from a store filled through the real repository API (pitstop.store.records),
on SQLite and PostgreSQL, rendered and parsed as Prometheus would."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from pitstop.config import Settings
from pitstop.metrics.collector import PitstopCollector
from pitstop.metrics.exporter import render
from pitstop.metrics.store_source import StoreSource, seconds_between
from pitstop.models import Cause, Verdict
from pitstop.store import records
from pitstop.store.records import ActionIntent, ActionState
from pitstop.store.tables import NodeEvent, Run
from tests.metrics.conftest import matching, parse, value

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
T0 = NOW - timedelta(hours=1)  # when the first job ended
PENDING = Verdict(cause=Cause.UNKNOWN, signature="pending", confidence=0.0)  # tasks.journal.PENDING_VERDICT


def _job(store, job_id: str, end: datetime, cause: Cause, signature: str) -> int:
    inc, created = records.create_job_incident(
        store, cluster="c1", job_id=job_id, end_time=end, nodes=["gpu01"],
        verdict=Verdict(cause=cause, signature=signature, confidence=0.9))
    assert created
    return inc.id


def _act(store, incident: int, seq: int, kind: str, started: datetime | None, state: str, at: datetime) -> None:
    records.plan_actions(store, incident, [ActionIntent(seq=seq, kind=kind, target="gpu01")])
    if started is not None:
        assert records.start_action(store, incident, seq, now=started)
    assert records.finish_action(store, incident, seq, state, "test", now=at)


def _check(store, node: str, result: str, at: datetime) -> None:
    with store.session() as s:  # what tasks.journal.record_checks writes for each swept node
        s.add(NodeEvent(cluster="c1", node=node, kind="check", state=result, detail="", at=at))
        s.commit()


@pytest.fixture
def filled(store):
    first = _job(store, "101", T0, Cause.GPU_HARDWARE, "xid-79")
    records.set_incident_status(store, first, "done")
    _act(store, first, 0, "drain", T0 + timedelta(seconds=7), "done", T0 + timedelta(seconds=8))
    _act(store, first, 1, "requeue", T0 + timedelta(seconds=40), "failed", T0 + timedelta(seconds=41))
    _act(store, first, 2, "notify_ops", None, "would_do", T0 + timedelta(seconds=3))  # observe mode: never started
    # the job's end was stamped by a host whose clock runs 100 s ahead of the one acting
    skewed = _job(store, "102", T0 + timedelta(seconds=100), Cause.NCCL_TIMEOUT, "nccl-watchdog")
    _act(store, skewed, 0, "drain", T0 + timedelta(seconds=50), "done", T0 + timedelta(seconds=51))

    alarm, _ = records.create_node_incident(store, cluster="c1", node="gpu02", alarm_id="a1", verdict=PENDING)
    records.plan_actions(store, alarm.id, [
        ActionIntent(seq=0, kind="reboot", target="gpu02", state=ActionState.AWAITING_APPROVAL),
        ActionIntent(seq=1, kind="gpu_reset", target="gpu02", state=ActionState.AWAITING_APPROVAL),
        ActionIntent(seq=2, kind="resume", target="gpu02"),
    ])
    assert records.resolve_approval(store, alarm.id, 1, approved=False, comment="not now", by="ops")

    records.record_node_state(store, "c1", "gpu01", state="IDLE+DRAIN", reason="pitstop: gpu_hardware", owner="pitstop")
    records.record_node_state(store, "c1", "gpu03", state="IDLE+DRAIN", reason="bad fan", owner="foreign")
    records.record_node_state(store, "c1", "gpu04", state="IDLE", owner="none")
    records.set_node_lemon(store, "c1", "gpu01", ["failed 3 health sweeps in 168 h"])
    records.open_breaker(store, "cluster", "storm: 9 drains in 10 min")
    records.open_breaker(store, "partition:a", "storm")
    records.reset_breaker(store, "partition:a", by="ops")
    records.set_mode(store, "act", by="ops")

    _check(store, "gpu01", "FAIL", NOW - timedelta(days=2))  # before the look-back: not counted
    _check(store, "gpu01", "OK", NOW - timedelta(hours=1))
    _check(store, "gpu01", "FAIL", NOW - timedelta(minutes=10))  # its latest: this one counts
    _check(store, "gpu02", "OK", NOW - timedelta(minutes=5))
    _check(store, "gpu03", "UNREACHABLE", NOW - timedelta(minutes=30))

    with store.session() as s:  # rows as pitstop.wrapper.record.RunRecorder leaves them
        for i, cause in enumerate(["cuda_oom", "cuda_oom", None]):
            s.add(Run(id=f"run-{i}", command=["python", "train.py"], cwd="/", host="h", user="u", run_dir="/tmp",
                      cause=cause, status="failed" if cause else "running"))
        s.commit()
    return store


def _scrape(store) -> dict:
    source = StoreSource(store, Settings(), clock=lambda: NOW)
    return parse(render(PitstopCollector([source], timeout_s=30)))


def test_incidents_by_cause_and_status_and_created_counter(filled) -> None:
    m = _scrape(filled)
    assert value(m, "pitstop_incidents", cluster="c1", kind="job", cause="gpu_hardware", status="done") == 1
    assert value(m, "pitstop_incidents", cluster="c1", kind="job", cause="nccl_timeout", status="open") == 1
    assert value(m, "pitstop_incidents", cluster="c1", kind="node", cause="unknown", status="open") == 1
    assert value(m, "pitstop_incidents_created_total", cluster="c1", kind="job") == 2
    assert value(m, "pitstop_incidents_created_total", cluster="c1", kind="node") == 1


def test_actions_by_kind_and_outcome(filled) -> None:
    m = _scrape(filled)
    finished = {dict(k)["kind"] + ":" + dict(k)["outcome"]: v for k, v in matching(m, "pitstop_actions_finished_total").items()}
    assert {k: v for k, v in finished.items() if v} == {"drain:done": 2, "requeue:failed": 1, "notify_ops:would_do": 1,
                                                        "gpu_reset:denied": 1}
    assert finished["reboot:done"] == 0  # exported at 0 before the first one, so increase() sees it
    assert value(m, "pitstop_actions", kind="reboot", state="awaiting_approval") == 1
    assert value(m, "pitstop_actions", kind="resume", state="intended") == 1
    assert value(m, "pitstop_actions", kind="drain", state="done") == 2


def test_event_to_action_latency_histogram(filled) -> None:
    m = _scrape(filled)
    h = "pitstop_event_to_action_seconds"
    # drain: 7 s after the job ended, and once "before" it (clock skew) which counts as 0 s
    assert value(m, h + "_count", kind="drain") == 2
    assert value(m, h + "_sum", kind="drain") == pytest.approx(7.0, abs=0.01)
    assert value(m, h + "_bucket", kind="drain", le="5.0") == 1
    assert value(m, h + "_bucket", kind="drain", le="10.0") == 2
    assert value(m, h + "_bucket", kind="drain", le="+Inf") == 2
    assert value(m, h + "_bucket", kind="requeue", le="30.0") == 0
    assert value(m, h + "_bucket", kind="requeue", le="60.0") == 1
    # a would_do action never starts: its latency runs to when it was recorded
    assert value(m, h + "_sum", kind="notify_ops") == pytest.approx(3.0, abs=0.01)
    # denied and waiting actions did nothing: no latency
    assert value(m, h + "_count", kind="gpu_reset") == 0 and value(m, h + "_count", kind="reboot") == 0


def test_nodes_breakers_mode(filled) -> None:
    m = _scrape(filled)
    assert value(m, "pitstop_nodes", cluster="c1", state="IDLE+DRAIN", drain_owner="pitstop") == 1
    assert value(m, "pitstop_nodes", cluster="c1", state="IDLE+DRAIN", drain_owner="foreign") == 1
    assert value(m, "pitstop_nodes", cluster="c1", state="IDLE", drain_owner="none") == 1
    assert value(m, "pitstop_nodes_lemon", cluster="c1") == 1
    assert value(m, "pitstop_breaker_open", scope="cluster") == 1
    assert value(m, "pitstop_breaker_open", scope="partition:a") == 0
    assert value(m, "pitstop_breaker_trips_total", scope="cluster") == 1
    assert {dict(k)["mode"]: v for k, v in matching(m, "pitstop_mode").items()} == {"observe": 0, "canary": 0, "act": 1}


def test_sweep_counts_each_node_by_its_latest_check_within_the_lookback(filled) -> None:
    m = _scrape(filled)
    sweep = {dict(k)["result"]: v for k, v in matching(m, "pitstop_sweep_nodes", cluster="c1").items()}
    assert sweep == {"FAIL": 1, "OK": 1, "UNREACHABLE": 1}
    newest = value(m, "pitstop_sweep_last_check_timestamp_seconds", cluster="c1")
    assert newest == pytest.approx((NOW - timedelta(minutes=5)).timestamp(), abs=0.01)


def test_classifier_verdicts_leave_out_unclassified(filled) -> None:
    m = _scrape(filled)
    incident = {dict(k)["cause"]: v for k, v in matching(m, "pitstop_classifier_verdicts", source="incident").items()}
    assert incident == {"gpu_hardware": 1, "nccl_timeout": 1}  # the pending node alarm is no verdict yet
    assert value(m, "pitstop_classifier_verdicts", source="run", cause="cuda_oom") == 2


def test_empty_store_exports_zero_counters_and_nothing_invented(store) -> None:
    m = parse(render(PitstopCollector([StoreSource(store, Settings(), cluster="c9", clock=lambda: NOW)], timeout_s=30)))
    assert value(m, "pitstop_source_up", source="store") == 1
    assert value(m, "pitstop_mode", mode="observe") == 1
    assert not matching(m, "pitstop_incidents") and not matching(m, "pitstop_nodes")
    # counters and histograms start at 0 (a series born at 1 hides its first step from increase())
    assert value(m, "pitstop_incidents_created_total", cluster="c9", kind="job") == 0
    assert value(m, "pitstop_incidents_created_total", cluster="c9", kind="node") == 0
    assert value(m, "pitstop_actions_finished_total", kind="drain", outcome="done") == 0
    assert value(m, "pitstop_event_to_action_seconds_count", kind="drain") == 0
    assert value(m, "pitstop_event_to_action_seconds_bucket", kind="drain", le="+Inf") == 0


def test_an_unsupported_database_is_named() -> None:
    with pytest.raises(ValueError, match="mysql database"):
        seconds_between("mysql", None, None)
