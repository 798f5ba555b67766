"""Rules narrowed by how long the job ran before it failed (`ran_at_least_minutes`).

The default policy requeues a software bug once when the job had run for an hour: a
deterministic bug fails at start-up, so a crash after thousands of good steps is most likely a race
or a flaky dependency (Llama 3, section 3.3.4: all but three of 419 interruptions, 54 of them
software bugs, were handled by automation). An early crash, or the same one again, stays the
user's. Pure: no store, no scheduler.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from pitstop.cluster.base import JobRecord
from pitstop.config import Mode
from pitstop.models import Cause, Verdict
from pitstop.policy import ActionKind, History, ModeState, decide, load_policy
from pitstop.policy.model import PolicyError, parse_policy

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
ACT = ModeState(mode=Mode.ACT)
POLICY = load_policy()
BUG = Verdict(cause=Cause.SOFTWARE_BUG, signature="python-exception", confidence=0.9)


def job(ran_minutes: float | None, *, naive: bool = False) -> JobRecord:
    end = NOW.replace(tzinfo=None) if naive else NOW
    start = None if ran_minutes is None else end - timedelta(minutes=ran_minutes)
    return JobRecord(job_id="300", user="alice", partition="gpu", state="FAILED", nodes=["gpu01", "gpu02"],
                     start_time=start, end_time=end)


def plan(ran_minutes: float | None, same_failures: int = 0, **kw):
    return decide(BUG, policy=POLICY, history=History(job_same_failures=same_failures), mode=ACT, now=NOW,
                  incident_id=7, job=job(ran_minutes, **kw))


def requeues(d) -> list[str]:
    return [a.disposition for a in d.actions if a.kind is ActionKind.REQUEUE]


def test_a_crash_after_an_hour_of_running_is_requeued_once() -> None:
    d = plan(90)
    assert d.rule == "software_bug:* (ran >= 60 min)"
    assert requeues(d) == ["run"]
    assert d.job_ran_minutes == pytest.approx(90)


def test_the_same_crash_again_goes_to_the_user() -> None:
    d = plan(90, same_failures=1)
    assert requeues(d) == ["blocked"]
    assert any("not requeued again" in a.blocked_why for a in d.actions if a.kind is ActionKind.REQUEUE)


@pytest.mark.parametrize("ran", [0.5, 59.9, None])
def test_an_early_crash_or_an_unknown_run_time_only_tells_the_user(ran) -> None:
    d = plan(ran)
    assert d.rule == "software_bug:*"
    assert requeues(d) == []


def test_naive_slurm_times_are_read_too() -> None:
    assert requeues(plan(120, naive=True)) == ["run"]


def test_a_run_time_rule_cannot_climb_a_ladder() -> None:
    text = POLICY_TEXT.replace("ladder: none_here", "ladder: reboot")
    with pytest.raises(PolicyError, match="ran_at_least_minutes"):
        parse_policy(text)


POLICY_TEXT = """
version: 1
ladders:
  reboot: {rungs: [reboot]}
rules:
  - cause: software_bug
    ran_at_least_minutes: 60
    ladder: none_here
    actions: [requeue]
"""
