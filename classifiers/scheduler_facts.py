"""Scheduler facts (Slurm state, exit code, signal) as evidence, from small data tables.

Facts become `FactHit`s with source "scheduler" and line 0 and compete with log hits by the same
priority scale as `rules.RULES`: state TIMEOUT after a NaN in the log is still `numerical`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from pitstop.models import Cause, SchedulerFacts


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

# Signals by number: what killed the process when nothing in the log says more.
SIGNAL_RULES: dict[int, FactRule] = {
    11: FactRule(signature="signal-11-sigsegv", cause=Cause.CRASH_SIGNAL, priority=24, confidence=0.7,
                 hint="the process segfaulted: collect a core dump; suspect native extensions"),
    6: FactRule(signature="signal-6-sigabrt", cause=Cause.CRASH_SIGNAL, priority=24, confidence=0.7,
                hint="the process aborted: look for an assert/terminate message"),
    # A page of a mapping the kernel could not back, most often a full /dev/shm (rules.py, sigbus).
    7: FactRule(signature="signal-7-sigbus", cause=Cause.HOST_OOM, priority=24, confidence=0.6,
                hint="bus error: a shared-memory page could not be backed, most often /dev/shm full "
                     "(--shm-size / --ipc=host for containers); else a truncated mmap'd file"),
    # The CPU refused an instruction: a binary built for a newer CPU than the node's (rules.py, sigill).
    4: FactRule(signature="signal-4-sigill", cause=Cause.ENVIRONMENT, priority=24, confidence=0.7,
                hint="illegal instruction: the binary was built for another CPU (AVX2/AVX-512): rebuild it for "
                     "the node's CPU or constrain the job to nodes that have the instructions"),
    8: FactRule(signature="signal-8-sigfpe", cause=Cause.CRASH_SIGNAL, priority=24, confidence=0.7,
                hint="arithmetic exception in native code"),
    9: FactRule(signature="signal-9-sigkill", cause=Cause.CRASH_SIGNAL, priority=19, confidence=0.5,
                hint="SIGKILL (OOM killer, scheduler or admin): check dmesg and sacct"),
    15: FactRule(signature="signal-15-sigterm", cause=Cause.CRASH_SIGNAL, priority=19, confidence=0.4,
                 hint="SIGTERM: usually a cancel, preemption or time limit"),
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
