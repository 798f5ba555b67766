"""The guards that make automation trustworthy. All pure: data in, verdicts out.

Ownership (only touch nodes whose drain reason Pitstop wrote), escalation ladder position,
damping of self-clearing faults, blast radius and storm guard (circuit breakers), the last-N-
healthy guard, modes (observe/canary/act) and lemon-node flags.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, Field

from pitstop.cluster.base import NodeInfo
from pitstop.config import Mode
from pitstop.models import Cause
from pitstop.policy.history import (
    DrainRecord,
    History,
    LemonSignals,
    PastIncident,
    drains_in_window,
    recurrences,
)
from pitstop.policy.model import FaultBehaviour, FaultClass, LemonThresholds, Policy

# --- ownership ------------------------------------------------------------------------------

REASON_PREFIX = "pitstop:"
_REASON_RE = re.compile(r"^pitstop: (?P<cause>\S+) (?P<signature>\S+) incident=(?P<incident>\S+)")
# Slurm keeps reasons short in `sinfo`; keep ours well inside what every tool shows.
MAX_REASON_CHARS = 120


def ownership_reason(cause: Cause | str, signature: str, incident_id: int | str | None) -> str:
    """The drain/reboot reason Pitstop writes: `pitstop: <cause> <signature> incident=<id>`."""
    sig = re.sub(r"\s+", "_", signature.strip()) or "-"
    reason = f"{REASON_PREFIX} {Cause(cause).value} {sig} incident={incident_id if incident_id is not None else '?'}"
    return reason[:MAX_REASON_CHARS]


class Owner(StrEnum):
    NONE = "none"  # not drained/down: free to act on
    PITSTOP = "pitstop"
    FOREIGN = "foreign"  # a human or another tool: information, never an order


def drain_owner(info: NodeInfo | None) -> Owner:
    """Who owns the node's current drain/down state. Unknown node info means no drain seen."""
    if info is None or not (info.is_drained or info.is_down):
        return Owner.NONE
    reason = (info.reason or "").strip()
    return Owner.PITSTOP if reason.startswith(REASON_PREFIX) else Owner.FOREIGN


def parse_reason(reason: str | None) -> dict[str, str] | None:
    """`{'cause','signature','incident'}` for a Pitstop reason; None for anyone else's."""
    m = _REASON_RE.match((reason or "").strip())
    return m.groupdict() if m else None


# --- escalation ladder ----------------------------------------------------------------------


class LadderPosition(BaseModel):
    ladder: str
    rung: int = Field(ge=0, description="0-based rung in use now")
    rungs: int = Field(ge=1)
    action: str = Field(description="what this rung does, e.g. gpu_reset or diag level 3")
    recurrences: int = Field(ge=0, description="same fault seen before within the window")
    window_hours: float

    def label(self) -> str:
        return f"{self.ladder} rung {self.rung + 1}/{self.rungs} ({self.action})"


def ladder_position(
    policy: Policy,
    ladder_name: str,
    past: list[PastIncident],
    now: datetime,
) -> LadderPosition:
    """Rung = earlier incidents on this node whose rule uses the same ladder, within the window.

    The top rung is sticky: recurrences past it stay on it.
    """
    ladder = policy.ladders[ladder_name]

    def same_fault(i: PastIncident) -> bool:
        rule = policy.rule_for(i.cause, i.signature)
        return rule is not None and rule.ladder == ladder_name

    count = recurrences(past, now, timedelta(hours=ladder.window_hours), same_fault)
    rung = min(count, len(ladder.rungs) - 1)
    step = ladder.rungs[rung]
    action = str(step.kind) + (f" level {step.level}" if step.level else "")
    return LadderPosition(
        ladder=ladder_name,
        rung=rung,
        rungs=len(ladder.rungs),
        action=action,
        recurrences=count,
        window_hours=ladder.window_hours,
    )


# --- sticky vs self-clearing ----------------------------------------------------------------


class Damping(BaseModel):
    signature: str
    occurrences: int = Field(description="including this one, within the window")
    threshold: int
    window_minutes: float

    @property
    def suppressed(self) -> bool:
        return self.occurrences < self.threshold

    def explain(self) -> str:
        verb = "below" if self.suppressed else "reached"
        return (
            f"self-clearing fault {self.signature}: {self.occurrences} of {self.threshold} "
            f"occurrences in {self.window_minutes:g} min ({verb} the threshold)"
        )


def damping_for(
    fault: FaultClass | None,
    signature: str,
    past: list[PastIncident],
    now: datetime,
) -> Damping | None:
    """None unless the signature is self-clearing; counts this occurrence plus earlier ones."""
    if fault is None or fault.behaviour is not FaultBehaviour.SELF_CLEARING:
        return None
    window = timedelta(minutes=fault.window_minutes)
    earlier = recurrences(past, now, window, lambda i: i.signature == signature)
    return Damping(
        signature=signature,
        occurrences=earlier + 1,
        threshold=fault.occurrences,
        window_minutes=fault.window_minutes,
    )


# --- blast radius, storm guard, last healthy ------------------------------------------------


class Block(StrEnum):
    RETRY_LIMIT = "retry_limit"
    BLAST_RADIUS = "blast_radius"
    BREAKER_OPEN = "breaker_open"
    LAST_HEALTHY = "last_healthy"
    FOREIGN_OWNER = "foreign_owner"
    NOT_OWNED = "not_owned"  # resume of a node that is not drained by Pitstop
    DAMPED = "damped"
    NO_TARGET = "no_target"


# Blocks a human may override by approving; the others are final for this decision.
APPROVABLE = frozenset({Block.BLAST_RADIUS, Block.BREAKER_OPEN, Block.LAST_HEALTHY})

CLUSTER_SCOPE = "cluster"


def partition_scope(partition: str) -> str:
    return f"partition:{partition}"


class BreakerTrip(BaseModel):
    """A breaker this decision opens; the flow persists it with `records.open_breaker`."""

    scope: str
    reason: str


class DrainCheck(BaseModel):
    """The outcome of checking one more automatic drain against every limit."""

    block: Block | None = None
    why: str = ""
    trips: list[BreakerTrip] = Field(default_factory=list)


def _over(
    count_after: int, size: int | None, max_count: int | None, max_pct: float | None, pct_floor: int = 1
) -> str | None:
    if max_count is not None and count_after > max_count:
        return f"{count_after} drains > limit {max_count}"
    if max_pct is not None and size and count_after >= pct_floor:
        pct = 100.0 * count_after / size
        if pct > max_pct + 1e-9:
            return f"{count_after} of {size} nodes ({pct:.0f}%) > limit {max_pct:g}%"
    return None


def check_drain(
    policy: Policy,
    history: History,
    node: str,
    partitions: list[str],
    now: datetime,
    planned: list[DrainRecord],
) -> DrainCheck:
    """May Pitstop drain `node` automatically now? `planned` are drains earlier in this decision.

    Order matters: an open breaker beats everything; then the storm guard (which opens a
    breaker); then the last-healthy guard; then the blast radius (which only asks).
    """
    guard = policy.storm_guard
    scopes = [partition_scope(p) for p in partitions] + [CLUSTER_SCOPE]
    open_scopes = [s for s in scopes if s in history.open_breakers]
    if open_scopes:
        s = open_scopes[0]
        return DrainCheck(
            block=Block.BREAKER_OPEN,
            why=f"circuit breaker {s} is open ({history.open_breakers[s]}); "
            "nothing drains automatically until a human runs `pitstop breaker reset`",
        )
    drains = history.recent_drains + planned
    window = timedelta(minutes=guard.window_minutes)
    trips: list[BreakerTrip] = []
    floor = guard.percent_min_drains
    resets = history.breaker_resets
    for p in partitions:
        state = history.partitions.get(p)
        after = drains_in_window(drains, now, window, partition=p, not_before=resets.get(partition_scope(p))) + 1
        over = _over(after, state.size if state else None, guard.partition_max_drains, guard.partition_max_percent, floor)
        if over:
            trips.append(BreakerTrip(scope=partition_scope(p), reason=f"storm guard: partition {p} {over} in {guard.window_minutes:g} min"))
    after = drains_in_window(drains, now, window, not_before=resets.get(CLUSTER_SCOPE)) + 1
    over = _over(after, history.cluster_size, guard.cluster_max_drains, guard.cluster_max_percent, floor)
    if over:
        trips.append(BreakerTrip(scope=CLUSTER_SCOPE, reason=f"storm guard: cluster {over} in {guard.window_minutes:g} min"))
    if trips:
        return DrainCheck(
            block=Block.BREAKER_OPEN,
            why="; ".join(t.reason for t in trips) + " - breaker opened, asking a human",
            trips=trips,
        )
    for p in partitions:
        state = history.partitions.get(p)
        if state is None:
            continue
        already = sum(1 for d in planned if p in d.partitions)
        left = state.healthy - already - 1
        if left < guard.min_healthy_nodes:
            return DrainCheck(
                block=Block.LAST_HEALTHY,
                why=f"draining {node} would leave {max(left, 0)} healthy node(s) in partition {p} "
                f"(minimum {guard.min_healthy_nodes})",
            )
    blast = policy.blast_radius
    hour = drains_in_window(drains, now, timedelta(hours=1)) + 1
    if hour > blast.max_nodes_per_hour:
        return DrainCheck(
            block=Block.BLAST_RADIUS,
            why=f"{hour} drains in the last hour > blast radius {blast.max_nodes_per_hour}/hour",
        )
    for p in partitions:
        state = history.partitions.get(p)
        if state is None or not state.size:
            continue
        out_after = state.size - state.healthy + sum(1 for d in planned if p in d.partitions) + 1
        pct = 100.0 * out_after / state.size
        if pct > blast.max_partition_percent + 1e-9:
            return DrainCheck(
                block=Block.BLAST_RADIUS,
                why=f"{out_after} of {state.size} nodes of partition {p} out ({pct:.0f}%) > "
                f"blast radius {blast.max_partition_percent:g}%",
            )
    return DrainCheck()


# --- modes ----------------------------------------------------------------------------------


class ModeState(BaseModel):
    """The mode in force for this decision (run-time setting, else settings default)."""

    mode: Mode = Mode.OBSERVE
    canary_partitions: list[str] = Field(default_factory=list)
    canary_nodes: list[str] = Field(default_factory=list)

    def allows(self, nodes: list[str], partitions: list[str]) -> tuple[bool, str]:
        """May an action on these nodes/partitions change the cluster? (allowed, why-not)."""
        if self.mode is Mode.ACT:
            return True, ""
        if self.mode is Mode.OBSERVE:
            return False, "observe mode: recorded and notified, nothing changed"
        inside = bool(set(nodes) & set(self.canary_nodes)) or bool(
            set(partitions) & set(self.canary_partitions)
        )
        if inside:
            return True, ""
        where = ", ".join(self.canary_partitions + self.canary_nodes) or "nothing listed"
        return False, f"canary mode: acts only on {where}"

    def label(self) -> str:
        if self.mode is Mode.CANARY:
            where = ", ".join(self.canary_partitions + self.canary_nodes) or "nothing listed"
            return f"canary ({where})"
        return self.mode.value


# --- lemon nodes ----------------------------------------------------------------------------


def lemon_reasons(signals: LemonSignals | None, t: LemonThresholds) -> list[str]:
    """Why a node is a lemon; empty when it is not."""
    if signals is None:
        return []
    days = f"in {t.window_days:g} days"
    checks: list[tuple[bool, str]] = [
        (signals.distinct_failed_jobs >= t.distinct_failed_jobs,
         f"{signals.distinct_failed_jobs} distinct failed jobs {days} (limit {t.distinct_failed_jobs})"),
        (signals.xid_count >= t.xid_count, f"{signals.xid_count} Xids {days} (limit {t.xid_count})"),
        (signals.tickets >= t.tickets, f"{signals.tickets} tickets {days} (limit {t.tickets})"),
    ]
    rate = signals.node_fail_rate
    if rate is not None and signals.jobs_run >= t.min_jobs_for_rate:
        checks.append((rate >= t.node_fail_rate,
                       f"node-fail rate {rate:.0%} over {signals.jobs_run} jobs (limit {t.node_fail_rate:.0%})"))
    return [why for hit, why in checks if hit]


SameFault = Callable[[PastIncident], bool]
