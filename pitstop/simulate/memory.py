"""What Pitstop's store would remember in the simulated run, and the `History` it gives a decision.

Mirrors `pitstop.store.records.load_history` (same windows: 28 days of incidents, 24 h of
drains; same lemon signals), with one deliberate difference: an incident counts for the nodes the
evidence named (faulty and suspect nodes), as `PastIncident.nodes` documents ("nodes the fault
was seen on"), not for every node of the job - as the store does (records._blamed). The retry
count is the store's too: earlier same-signature failures of the job on a node it can still land
on, or on no node in particular.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta, timezone

from pitstop.models import Cause
from pitstop.policy.history import DrainRecord, History, LemonSignals, PartitionState, PastIncident
from pitstop.simulate.pool import PARTITION

EPOCH = datetime(2024, 1, 1, tzinfo=timezone.utc)  # a Monday, 00:00: the simulation's t = 0
LOOKBACK = timedelta(days=28)
DRAIN_WINDOW = timedelta(hours=24)


def at(t_minutes: float) -> datetime:
    return EPOCH + timedelta(minutes=t_minutes)


class Memory:
    def __init__(self, pool_size: int) -> None:
        self.pool_size = pool_size
        self.next_id = 1
        self.node_incidents: dict[str, list[PastIncident]] = defaultdict(list)
        self.same: dict[tuple[str, str], list[frozenset[str]]] = defaultdict(list)  # -> blamed nodes each
        self.drains: list[DrainRecord] = []
        self.tickets: dict[str, list[datetime]] = defaultdict(list)
        self.breakers: dict[str, str] = {}
        self.breaker_resets: dict[str, datetime] = {}

    def history(self, now: datetime, job_id: str | None, signature: str, nodes: list[str], healthy: int) -> History:
        since = now - LOOKBACK
        self.drains = [d for d in self.drains if d.at >= now - DRAIN_WINDOW]
        per_node = {n: [i for i in self.node_incidents.get(n, ()) if i.at >= since] for n in nodes}
        lemon = {
            n: LemonSignals(
                distinct_failed_jobs=len({i.job_id for i in mine if i.job_id}),
                xid_count=sum(1 for i in mine if i.signature.startswith("xid-")),
                tickets=sum(1 for t in self.tickets.get(n, ()) if t >= since),
                node_faults=len(mine),
            )
            for n, mine in per_node.items()
        }
        return History(
            job_same_failures=sum(1 for blamed in self.same.get((job_id, signature), ())
                                  if not blamed or blamed & set(nodes)) if job_id else 0,
            node_incidents=per_node,
            lemon_signals=lemon,
            recent_drains=list(self.drains),
            partitions={PARTITION: PartitionState(name=PARTITION, size=self.pool_size, healthy=healthy)},
            cluster_size=self.pool_size,
            cluster_healthy=healthy,
            open_breakers=dict(self.breakers),
            breaker_resets=dict(self.breaker_resets),
        )

    def record_incident(self, now: datetime, cause: Cause, signature: str, job_id: str | None, nodes: list[str]) -> int:
        incident_id = self.next_id
        self.next_id += 1
        past = PastIncident(id=incident_id, at=now, cause=cause, signature=signature, job_id=job_id, nodes=nodes)
        for n in nodes:
            self.node_incidents[n].append(past)
        if job_id:
            self.same[(job_id, signature)].append(frozenset(nodes))
        return incident_id

    def record_drain(self, node: str, now: datetime) -> None:
        self.drains.append(DrainRecord(node=node, at=now, partitions=[PARTITION]))

    def record_ticket(self, node: str, now: datetime) -> None:
        self.tickets[node].append(now)

    def open_breaker(self, scope: str, reason: str) -> None:
        self.breakers.setdefault(scope, reason)

    def reset_breakers(self, now: datetime) -> None:
        """A human runs `pitstop breaker reset` (after answering the page that named it)."""
        for scope in self.breakers:
            self.breaker_resets[scope] = now
        self.breakers.clear()
