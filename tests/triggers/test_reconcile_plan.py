"""The pure reconciliation plan: which routed events and unfinished incidents get a new run."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from pitstop.events.models import JobEnded, NodeAlarm
from pitstop.reconcile.model import KnownIncident, KnownRun, Limits, SeenEvent
from pitstop.reconcile.plan import plan, render_parameters
from pitstop.store.records import job_incident_key, node_incident_key

NOW = datetime(2026, 5, 4, 12, 0, tzinfo=timezone.utc)
LIMITS = Limits(grace_s=60, stale_s=600, max_attempts=3)


def _routes():
    from deployments.reconcile import routes

    return routes()


def _seen(wire, received: datetime | None = None) -> SeenEvent:
    return SeenEvent.model_validate({**wire.to_api(), "received": (received or wire.occurred).isoformat()})


def job_event(job_id: str = "1234", minutes_ago: float = 10, end_time: bool = True, state: str = "FAILED"):
    at = NOW - timedelta(minutes=minutes_ago)
    job = JobEnded(cluster="gpu", job_id=job_id, state=state, exit_code=1, seen_at=at,
                   end_time=at if end_time else None, nodes=["gpu01"])
    return job, _seen(job.to_wire())


def alarm_event(node: str = "gpu02", minutes_ago: float = 10):
    alarm = NodeAlarm(cluster="gpu", node=node, alarm="prolog_failed", summary="xid 79", job_id="9",
                      raised_at=NOW - timedelta(minutes=minutes_ago))
    return alarm, _seen(alarm.to_wire())


def run(rid: str, params: dict, state: str, deployment: str = "post-failure", minutes_ago: float = 9) -> KnownRun:
    at = NOW - timedelta(minutes=minutes_ago)
    return KnownRun(id=rid, deployment=deployment, deployment_id=f"dep-{deployment}", parameters=params,
                    state=state, state_since=at, created=at)


def automation_params(event: SeenEvent) -> dict:
    """What Prefect's run-deployment action rendered for this event (tests/triggers/test_deployments.py
    checks the real automation's parameters have this shape)."""
    if event.event == "pitstop.job.ended":
        return {"job_id": event.payload["job_id"], "cluster": event.payload["cluster"], "facts": event.payload}
    return {"node": event.payload["node"], "alarm": event.payload["alarm"], "details": event.payload["details"]}


def job_incident(job: JobEnded, status: str = "done", flow_run_id: str | None = None, lock: str = "unknown",
                 created_minutes_ago: float = 9, iid: int = 1) -> KnownIncident:
    return KnownIncident(id=iid, kind="job", cluster=job.cluster, job_id=job.job_id,
                         idem_key=job_incident_key(job.cluster, job.job_id, job.end_time or NOW - timedelta(hours=3)),
                         end_time=job.end_time, status=status, flow_run_id=flow_run_id, lock=lock,
                         created_at=(NOW - timedelta(minutes=created_minutes_ago)).replace(tzinfo=None))


def test_event_the_automation_dropped_gets_the_run_it_would_have_made() -> None:
    _, event = job_event()
    result = plan(_routes(), [event], [], [], NOW, LIMITS)
    [start] = result.start
    assert start.deployment == "post-failure" and start.deployment_id is None
    assert start.parameters == automation_params(event)
    assert render_parameters(_routes()[0].parameters, event) == automation_params(event)
    assert "the automation dropped it" in start.why
    assert start.idempotency_key.endswith("attempt 1")
    assert plan(_routes(), [event], [], [], NOW, LIMITS).start[0].idempotency_key == start.idempotency_key


@pytest.mark.parametrize("case", ["young", "incident", "scheduled", "completed", "running", "success"])
def test_events_that_need_nothing(case: str) -> None:
    job, event = job_event(minutes_ago=0.5 if case == "young" else 10, state="COMPLETED" if case == "success" else "FAILED")
    runs, incidents = [], []
    if case == "incident":
        incidents = [job_incident(job)]
    elif case in {"scheduled", "completed", "running"}:
        runs = [run("r1", automation_params(event), case.upper(), minutes_ago=2)]
    result = plan(_routes(), [event], runs, incidents, NOW, LIMITS)
    assert result.start == [] and result.crash == [] and result.give_up == []
    expected = {"young": "young", "incident": "settled", "completed": "settled", "scheduled": "in_flight",
                "running": "in_flight"}
    if case in expected:
        assert getattr(result, expected[case]) == 1


def test_without_an_end_time_only_an_incident_opened_after_the_event_answers_it() -> None:
    job, event = job_event(end_time=False)
    later = job_incident(job, created_minutes_ago=9)
    earlier = job_incident(job, created_minutes_ago=90)  # the same job id ending an hour before
    assert plan(_routes(), [event], [], [later], NOW, LIMITS).settled == 1
    assert len(plan(_routes(), [event], [], [earlier], NOW, LIMITS).start) == 1


def test_a_run_busy_for_too_long_without_an_incident_is_dead() -> None:
    _, event = job_event(minutes_ago=30)
    stale = run("r1", automation_params(event), "RUNNING", minutes_ago=25)
    result = plan(_routes(), [event], [stale], [], NOW, LIMITS)
    assert [c.flow_run_id for c in result.crash] == ["r1"]
    [start] = result.start
    assert start.replaces == "r1" and start.idempotency_key.endswith("attempt 2")


def test_after_max_attempts_it_gives_up_and_says_so() -> None:
    _, event = job_event(minutes_ago=30)
    failed = [run(f"r{i}", automation_params(event), "FAILED", minutes_ago=29 - i) for i in range(3)]
    result = plan(_routes(), [event], failed, [], NOW, LIMITS)
    assert result.start == []
    [gave_up] = result.give_up
    assert "3 runs already" in gave_up.why and "re-run it by hand" in gave_up.why


def test_node_alarm_events() -> None:
    alarm, event = alarm_event()
    [start] = plan(_routes(), [event], [], [], NOW, LIMITS).start
    assert start.deployment == "node-alarm" and start.parameters == automation_params(event)
    incident = KnownIncident(id=3, kind="node", cluster="demo", node=alarm.node, status="done",
                             idem_key=node_incident_key("demo", alarm.node, alarm.event_id),
                             created_at=NOW.replace(tzinfo=None))
    assert plan(_routes(), [event], [], [incident], NOW, LIMITS).settled == 1


def test_stuck_incident_whose_process_died_is_resumed_with_the_same_parameters() -> None:
    job, event = job_event(minutes_ago=30)
    params = automation_params(event)
    killed = run("r1", params, "RUNNING", minutes_ago=28)
    incident = job_incident(job, status="acting", flow_run_id="r1", lock="free")
    result = plan(_routes(), [event], [killed], [incident], NOW, LIMITS)
    [start] = result.start
    assert start.parameters == params and start.deployment_id == "dep-post-failure"
    assert start.incident_id == 1 and start.replaces == "r1" and "acting" in start.why
    assert [c.flow_run_id for c in result.crash] == ["r1"]
    assert result.settled == 0  # the event is the incident's: not planned a second time


@pytest.mark.parametrize(("state", "lock", "minutes_ago", "alive"), [
    ("RUNNING", "held", 28, True),      # a live process holds the incident
    ("PAUSED", "held", 28, True),       # waiting for approval, process alive
    ("PAUSED", "free", 28, False),      # waiting for approval, process gone
    ("RUNNING", "unknown", 28, True),   # run elsewhere: Prefect's word
    ("CRASHED", "unknown", 28, False),
    ("FAILED", "free", 28, False),
    ("CANCELLED", "free", 28, False),
    ("RUNNING", "free", 0.5, True),     # just started, not at the lock yet
    ("SCHEDULED", "free", 28, True),    # waiting for a worker
])
def test_stuck_incident_liveness(state: str, lock: str, minutes_ago: float, alive: bool) -> None:
    job, _ = job_event(minutes_ago=30)
    params = {"job_id": job.job_id, "cluster": job.cluster, "facts": job.model_dump(mode="json")}
    incident = job_incident(job, status="awaiting_approval" if state == "PAUSED" else "acting",
                            flow_run_id="r1", lock=lock)
    result = plan(_routes(), [], [run("r1", params, state, minutes_ago=minutes_ago)], [incident], NOW, LIMITS)
    assert (result.in_flight == 1) is alive and (len(result.start) == 0) is alive
    if not alive:
        assert [c.flow_run_id for c in result.crash] == (["r1"] if state in {"RUNNING", "PAUSED"} else [])


def test_a_resumed_incident_is_not_resumed_twice() -> None:
    job, event = job_event(minutes_ago=30)
    params = automation_params(event)
    crashed = run("r1", params, "CRASHED", minutes_ago=28)
    resumed = run("r2", params, "SCHEDULED", minutes_ago=1)  # started by the previous pass
    incident = job_incident(job, status="acting", flow_run_id="r1", lock="free")
    result = plan(_routes(), [event], [crashed, resumed], [incident], NOW, LIMITS)
    assert result.start == [] and result.in_flight == 1


def test_incident_whose_run_prefect_forgot_is_reported() -> None:
    job, _ = job_event()
    result = plan(_routes(), [], [], [job_incident(job, status="acting", flow_run_id="gone")], NOW, LIMITS)
    assert result.start == [] and "re-run it by hand" in result.notes[0]


def test_unrenderable_route_parameters_are_a_note_not_a_crash() -> None:
    from pitstop.reconcile.model import Route

    _, event = job_event()
    odd = Route(flow="post-failure", deployment="post-failure", event="pitstop.job.ended",
                parameters={"job_id": "job {{ event.payload.job_id }}"})
    result = plan([odd], [event], [], [], NOW, LIMITS)
    assert result.start == [] and "only '{{ event.<path> }}' templates" in result.notes[0]
