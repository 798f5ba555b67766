"""Escalation inside one incident and where each node ends up (pure: no Prefect, no cluster).

The default ladders follow NVIDIA's Xid catalog buckets: Xid 95 (RESET_GPU) starts at a GPU
reset; if the reset or the check after it fails, the same incident reboots, then runs DCGM level
3, then opens an RMA ticket.
"""

from __future__ import annotations

from datetime import datetime, timezone

from pitstop.cluster.base import NodeInfo
from pitstop.config import Mode
from pitstop.models import Cause, Evidence, Verdict
from pitstop.policy import ActionKind, load_policy
from pitstop.policy.decide import Decision, decide
from pitstop.policy.escalation import EndState, StepOutcome, extend_decision, next_rung_steps, node_end_states
from pitstop.policy.history import History, PartitionState
from pitstop.policy.safety import ModeState

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
ACT = ModeState(mode=Mode.ACT)
POLICY = load_policy()
# The same, asking before every reboot (the default skips asking for a node the incident drained).
STRICT = POLICY.model_copy(update={"reboot_drained_without_approval": False})
NODES = {"n1": NodeInfo(name="n1", state="IDLE", partitions=["gpu"])}
HISTORY = History(partitions={"gpu": PartitionState(name="gpu", size=16, healthy=16)}, cluster_size=16)


def xid_alarm(xid: int, mode: ModeState = ACT) -> Decision:
    v = Verdict(cause=Cause.GPU_HARDWARE, signature=f"xid-{xid}", confidence=0.95,
                evidence=[Evidence(line=1, text=f"NVRM: Xid (PCI:0000:3b:00): {xid}, pid=1, ...")])
    return decide(v, policy=POLICY, history=HISTORY, mode=mode, now=NOW, incident_id=7, node="n1", nodes=NODES)


def run_all(d: Decision, outcomes: dict[int, StepOutcome], *, fail: set[ActionKind] = frozenset(),
            diag_passes: bool = False, answer: str = "done") -> None:
    """What the executor would journal: every not-yet-run node step done (or failed), diags
    passing or not, resume kept drained when its diag failed, asked steps answered `answer`."""
    for a in d.actions:
        if a.seq in outcomes:
            continue
        if a.disposition == "would_do":
            outcomes[a.seq] = StepOutcome(state="would_do")
        elif a.disposition == "ask" and answer != "done":
            outcomes[a.seq] = StepOutcome(state=answer)
        elif a.kind is ActionKind.DIAG:
            outcomes[a.seq] = StepOutcome(state="done", passed=diag_passes)
        elif a.kind is ActionKind.RESUME:
            outcomes[a.seq] = StepOutcome(state="done" if diag_passes else "skipped")
        elif a.kind is ActionKind.RMA_TICKET:
            outcomes[a.seq] = StepOutcome(state="done", ticket_id=41)
        else:
            outcomes[a.seq] = StepOutcome(state="failed" if a.kind in fail else "done")


def climb(d: Decision, outcomes: dict[int, StepOutcome], policy=POLICY) -> list:
    steps = next_rung_steps(d, policy, outcomes)
    return extend_decision(d, steps, policy=policy, history=HISTORY, mode=ACT, now=NOW, nodes=NODES)


def test_failed_reset_climbs_to_reboot_then_diag_then_rma_in_one_incident() -> None:
    d = xid_alarm(95)
    assert [a.kind for a in d.actions if a.rung is not None] == [ActionKind.GPU_RESET]
    outcomes: dict[int, StepOutcome] = {}
    run_all(d, outcomes, fail={ActionKind.GPU_RESET})  # "GPU is lost"
    reboot = climb(d, outcomes)
    assert [(a.kind, a.rung) for a in reboot] == [(ActionKind.REBOOT, 1), (ActionKind.DIAG, None), (ActionKind.RESUME, None)]
    assert reboot[0].disposition == "run"  # n1 was drained by this incident: no human needed
    assert reboot[0].seq == max(a.seq for a in d.actions if a not in reboot) + 1
    assert next_rung_steps(d, POLICY, outcomes) == []  # idempotent until the new steps have run
    run_all(d, outcomes)  # approved, rebooted, the check still fails
    deep = climb(d, outcomes)
    assert [(a.kind, a.diag_level) for a in deep] == [(ActionKind.DIAG, 3), (ActionKind.RESUME, None)]
    run_all(d, outcomes)
    rma = climb(d, outcomes)
    assert [a.kind for a in rma] == [ActionKind.RMA_TICKET] and rma[0].disposition == "ask"
    run_all(d, outcomes)
    assert climb(d, outcomes) == []  # a ticket ends the ladder
    (end,) = node_end_states(d, POLICY, outcomes)
    assert end.state is EndState.RMA and "#41" in end.detail
    assert any("escalated within the incident: n1 rung 2 (reboot)" in n for n in d.explain())


def test_check_passes_after_the_reset_node_returns() -> None:
    d = xid_alarm(95)
    outcomes: dict[int, StepOutcome] = {}
    run_all(d, outcomes, diag_passes=True)
    assert climb(d, outcomes) == []
    (end,) = node_end_states(d, POLICY, outcomes)
    assert end.state is EndState.IN_SERVICE


def test_xid79_reboots_first_and_a_passing_check_resumes() -> None:
    d = xid_alarm(79)  # NVIDIA RESTART_BM: a reset cannot bring back a GPU that fell off the bus
    assert ActionKind.GPU_RESET not in [a.kind for a in d.actions]
    assert [a.kind for a in d.actions if a.rung is not None] == [ActionKind.REBOOT]
    outcomes: dict[int, StepOutcome] = {}
    run_all(d, outcomes)  # reboot done, check fails
    assert [a.kind for a in climb(d, outcomes)] == [ActionKind.DIAG, ActionKind.RESUME]


def test_denied_rung_hands_the_node_to_its_owner_and_never_climbs() -> None:
    d = xid_alarm(95)
    outcomes: dict[int, StepOutcome] = {}
    run_all(d, outcomes, fail={ActionKind.GPU_RESET})
    climb(d, outcomes, STRICT)
    run_all(d, outcomes, answer="denied")  # the operator said no to the reboot
    assert climb(d, outcomes, STRICT) == []
    (end,) = node_end_states(d, POLICY, outcomes)
    assert end.state is EndState.HANDED_OVER and end.owner == "ops" and "denied" in end.detail


def test_waiting_for_approval_is_its_own_end_state() -> None:
    d = xid_alarm(95)
    outcomes: dict[int, StepOutcome] = {}
    run_all(d, outcomes, fail={ActionKind.GPU_RESET})
    climb(d, outcomes, STRICT)
    run_all(d, outcomes, answer="awaiting_approval")
    assert climb(d, outcomes, STRICT) == []
    (end,) = node_end_states(d, POLICY, outcomes)
    assert end.state is EndState.AWAITING_APPROVAL and "reboot" in end.detail


def test_observe_mode_never_escalates() -> None:
    d = xid_alarm(95, ModeState(mode=Mode.OBSERVE))
    outcomes: dict[int, StepOutcome] = {}
    run_all(d, outcomes)
    assert next_rung_steps(d, POLICY, outcomes) == []
    (end,) = node_end_states(d, POLICY, outcomes)
    assert end.state is EndState.NOT_ACTED


def test_mechanical_fault_is_handed_to_a_person() -> None:
    d = xid_alarm(54)  # NVIDIA CHECK_MECHANICALS: auxiliary power not connected
    outcomes: dict[int, StepOutcome] = {}
    run_all(d, outcomes)
    assert climb(d, outcomes) == []
    (end,) = node_end_states(d, POLICY, outcomes)
    assert end.state is EndState.HANDED_OVER and end.owner == "ops"
