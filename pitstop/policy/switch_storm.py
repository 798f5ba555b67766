"""Is this failure one of many on the nodes of one leaf switch? Pure: data in, verdict out.

A leaf switch that dies ends every job cabled to it within minutes, and each job's log blames its
own NIC or collective. Counted job by job, the storm guard drains the leaf one node at a time and
asks a human per job; seen together it is one fabric fault with one owner (the network team).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, Field

from pitstop.cluster.hostlist import compress
from pitstop.models import GUESS_SIGNATURE_PREFIX, Cause
from pitstop.policy.history import PastIncident, as_utc
from pitstop.policy.model import SwitchStormRule

# An incident whose flow has not classified it yet (journal.PENDING_VERDICT): in a burst most of
# the leaf's incidents are still at this stage, and they count, or the first dozen would each
# drain a node before any saw the others.
PENDING_SIGNATURE = "pending"


class SwitchStorm(BaseModel):
    switch: str
    members: list[str] = Field(description="every node cabled to the switch")
    jobs: list[str] = Field(description="the other failed jobs counted, earliest first")
    incidents: list[int] = Field(default_factory=list, description="their incident ids")
    first_at: datetime
    window_minutes: float
    fabric_incident_id: int | None = Field(default=None, description="the switch's incident, set by the flow")
    opened_here: bool = Field(default=False, description="this incident opened the fabric incident")

    def summary(self) -> str:
        return (f"switch storm: {len(self.jobs) + 1} jobs failed on nodes of leaf switch {self.switch} within "
                f"{self.window_minutes:g} min; the switch is at fault, not the nodes: none is drained one by one, "
                f"the requeue keeps off its {len(self.members)} nodes ({compress(self.members)})")

    def drain_hint(self) -> str:
        return (f"to keep new jobs off the switch until it is fixed: scontrol update NodeName={compress(self.members)} "
                f"State=DRAIN Reason=\"switch {self.switch} down\"")


def _counts(incident: PastIncident, causes: set[Cause]) -> bool:
    if incident.signature.startswith(GUESS_SIGNATURE_PREFIX):  # a guess is no evidence against a switch
        return False
    return incident.cause in causes or (incident.cause is Cause.UNKNOWN and incident.signature == PENDING_SIGNATURE)


def find_switch_storm(
    rule: SwitchStormRule,
    switches: dict[str, list[str]],
    recent: list[PastIncident],
    cause: Cause,
    nodes: list[str],
    job_id: str | None,
    now: datetime,
) -> SwitchStorm | None:
    """The leaf switch under `nodes` on which, with this failure, at least `rule.min_incidents`
    distinct jobs failed with a fabric cause (or are not classified yet) in the window; the leaf
    with most such jobs when the nodes span several. Several failures of one job count once: a
    job that keeps failing on one leaf is that job's problem, not a storm."""
    if cause not in rule.causes or not nodes or not switches:
        return None
    since = as_utc(now) - timedelta(minutes=rule.window_minutes)
    mine = set(nodes)
    best: SwitchStorm | None = None
    for leaf, members in sorted(switches.items()):
        cabled = set(members)
        if not mine & cabled:
            continue
        hits = sorted((i for i in recent if as_utc(i.at) >= since and _counts(i, rule.causes)
                       and set(i.nodes) & cabled and i.job_id and i.job_id != job_id),
                      key=lambda i: (as_utc(i.at), i.id or 0))
        jobs = list(dict.fromkeys(i.job_id for i in hits))
        if len(jobs) + 1 < rule.min_incidents or (best is not None and len(jobs) <= len(best.jobs)):
            continue
        best = SwitchStorm(switch=leaf, members=sorted(cabled), jobs=jobs,
                           incidents=[i.id for i in hits if i.id is not None],
                           first_at=as_utc(hits[0].at), window_minutes=rule.window_minutes)
    return best
