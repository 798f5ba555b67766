"""Scheduler facts (Slurm state, exit code, signal) as evidence, from small data tables.

Facts become `FactHit`s with source "scheduler" and line 0 and compete with log hits by the same
priority scale as `rules.RULES`: state TIMEOUT after a NaN in the log is still `numerical`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from pitstop.models import Cause, SchedulerFacts

from classifiers.signal_meaning import SIGNALS


class FactRule(BaseModel):
    model_config = ConfigDict(frozen=True)

    signature: str
    cause: Cause
    priority: int
    confidence: float
    hint: str


# Slurm job states (sacct/squeue spelling; "CANCELLED by 1234" matches on its first word).
STATE_RULES: dict[str, FactRule] = {
    "TIMEOUT": FactRule(signature="slurm-state-timeout", cause=Cause.TIME_LIMIT, priority=50, confidence=0.9,
                        hint="the job hit its time limit: request more time or checkpoint more often"),
    "DEADLINE": FactRule(signature="slurm-state-deadline", cause=Cause.TIME_LIMIT, priority=50, confidence=0.9,
                         hint="the job reached its deadline: submit with a later --deadline"),
    "NODE_FAIL": FactRule(signature="slurm-state-node-fail", cause=Cause.NODE_FAILURE, priority=90, confidence=0.9,
                          hint="the scheduler lost a node of the job: check that node; requeue"),
    "BOOT_FAIL": FactRule(signature="slurm-state-boot-fail", cause=Cause.NODE_FAILURE, priority=90, confidence=0.9,
                          hint="a node failed to boot for the job: check the node; requeue"),
    "OUT_OF_MEMORY": FactRule(signature="slurm-state-out-of-memory", cause=Cause.HOST_OOM, priority=85, confidence=0.9,
                              hint="the job exceeded its memory limit: request more --mem or reduce usage"),
    "PREEMPTED": FactRule(signature="slurm-state-preempted", cause=Cause.PREEMPTED, priority=55, confidence=0.9,
                          hint="the job was preempted: requeue it"),
    "CANCELLED": FactRule(signature="slurm-state-cancelled", cause=Cause.PREEMPTED, priority=45, confidence=0.8,
                          hint="the job was cancelled by a user or admin"),
    "REVOKED": FactRule(signature="slurm-state-revoked", cause=Cause.PREEMPTED, priority=45, confidence=0.7,
                        hint="the job was revoked (federation): requeue if needed"),
    "COMPLETED": FactRule(signature="slurm-state-completed", cause=Cause.SUCCESS, priority=35, confidence=0.8,
                          hint="the job finished normally"),
}

# Signals by number, when nothing in the log says more: cause and hint from the shared table
# (signal_meaning.py), so a new signal there needs no row here. A fact weighs less than a line the
# job printed (priority 24); a kill or a term least (anyone may send those), and a bus error is
# less sure of its cause than the other crashes.
_DEFAULT_WEIGHT = (24, 0.7)  # (priority, confidence)
_WEIGHTS: dict[int, tuple[int, float]] = {9: (19, 0.5), 15: (19, 0.4), 7: (24, 0.6)}
SIGNAL_RULES: dict[int, FactRule] = {
    number: FactRule(signature=f"signal-{number}-{meaning.name}", cause=meaning.cause,
                     priority=_WEIGHTS.get(number, _DEFAULT_WEIGHT)[0],
                     confidence=_WEIGHTS.get(number, _DEFAULT_WEIGHT)[1], hint=meaning.hint)
    for number, meaning in SIGNALS.items()
}

EXIT_ZERO = FactRule(signature="exit-0", cause=Cause.SUCCESS, priority=35, confidence=0.85,
                     hint="the job exited 0 and the log shows no failure")
EXIT_NONZERO = FactRule(signature="exit-nonzero", cause=Cause.UNKNOWN, priority=1, confidence=0.2,
                        hint="the job failed without a recognised cause: read the log tail")


class FactHit(BaseModel):
    model_config = ConfigDict(frozen=True)

    rule: FactRule
    text: str


def fact_hits(facts: SchedulerFacts | None) -> list[FactHit]:
    """Every rule the scheduler facts trigger, each with the fact as its evidence text."""
    if facts is None:
        return []
    hits: list[FactHit] = []
    state = (facts.state or "").strip().upper()
    if state:
        base = state.split()[0].rstrip("+")
        rule = STATE_RULES.get(base)
        if rule is not None:
            hits.append(FactHit(rule=rule, text=f"scheduler state {state}"))
    signal = facts.signal
    if signal is None and facts.exit_code is not None and 128 < facts.exit_code < 160:
        signal = facts.exit_code - 128  # shells report death-by-signal N as 128+N
    if signal is None and facts.exit_code is not None and facts.exit_code < 0:
        signal = -facts.exit_code  # Python/torchrun report death-by-signal N as -N
    if signal:
        rule = SIGNAL_RULES.get(signal)
        if rule is not None:
            hits.append(FactHit(rule=rule, text=f"killed by signal {signal}" + _exit_suffix(facts)))
    if facts.exit_code == 0 and not signal:
        hits.append(FactHit(rule=EXIT_ZERO, text="exit code 0"))
    elif facts.exit_code is not None and facts.exit_code != 0:
        hits.append(FactHit(rule=EXIT_NONZERO.model_copy(update={"signature": f"exit-{facts.exit_code}"}),
                            text=f"exit code {facts.exit_code}"))
    if facts.reason:
        hits.append(FactHit(rule=EXIT_NONZERO.model_copy(update={"signature": "scheduler-reason", "priority": 0}),
                            text=f"scheduler reason: {facts.reason}"))
    return hits


def _exit_suffix(facts: SchedulerFacts) -> str:
    return f" (exit code {facts.exit_code})" if facts.exit_code is not None else ""
