"""Metrics from the store: a handful of aggregate queries per scrape, nothing kept in memory.

Every process writes the store (flows, workers, the wrapper), so counting there needs no shared
in-process registry and survives restarts. Each query is a GROUP BY over indexed columns; the
one over node events is bounded by `metrics.sweep_lookback_s` because that table grows with
every sweep.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from sqlalchemy import case, func, select
from sqlalchemy.engine import Connection

from pitstop.config import Mode, Settings
from pitstop.metrics.samples import HistogramSample, Reading, Sample
from pitstop.policy.model import ActionKind
from pitstop.store.db import Store
from pitstop.store.records import FINISHED, ActionState, breakers, get_mode
from pitstop.store.tables import ActionRecord, Incident, NodeEvent, NodeRecord, Run

# An incident is opened before its evidence is classified, with this signature
# (tasks.journal.PENDING_VERDICT); such an incident is not a classifier verdict yet.
PENDING_SIGNATURE = "pending"

# Journal states in which an action did something (or, in observe mode, would have).
ACTED = (ActionState.DONE.value, ActionState.FAILED.value, ActionState.WOULD_DO.value)

UNKNOWN = "unknown"  # label value for a NULL column (Prometheus has no null)
INCIDENT_KINDS = ("job", "node", "switch")  # Incident.kind

# Counters and histograms are exported at 0 before their first event: Prometheus' increase() and
# rate() cannot see the step of a series that is born at 1 (Prometheus docs, "Counters" in
# instrumentation best practices: initialise labelled metrics you know of).


def _label(value: object) -> str:
    return str(value) if value not in (None, "") else UNKNOWN


def _utc(dt: datetime) -> datetime:
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt  # SQLite hands back naive UTC


def seconds_between(dialect: str, later, earlier):
    """SQL for `later - earlier` in seconds; the store runs on SQLite or PostgreSQL only."""
    if dialect == "sqlite":
        return (func.julianday(later) - func.julianday(earlier)) * 86400.0
    if dialect == "postgresql":
        return func.extract("epoch", later - earlier)
    raise ValueError(f"no latency query for a {dialect} database (Pitstop supports sqlite and postgresql)")


class StoreSource:
    name = "store"

    def __init__(self, store: Store, settings: Settings, cluster: str | None = None,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.store = store
        self.settings = settings
        self.cluster = cluster  # the cluster this installation remediates: its counters start at 0
        self.clock = clock
        self.buckets = sorted({float(b) for b in settings.metrics.latency_buckets_s if b > 0})

    def read(self) -> Reading:
        out: Reading = []
        with self.store.engine.connect() as conn:
            out += self._incidents(conn)
            out += self._actions(conn)
            out += self._latency(conn)
            out += self._nodes(conn)
            out += self._sweep(conn)
            out += self._run_verdicts(conn)
        out += self._breakers_and_mode()
        return out

    def _incidents(self, conn: Connection) -> Reading:
        classified = case((Incident.signature == PENDING_SIGNATURE, 0), else_=1)
        rows = conn.execute(
            select(Incident.cluster, Incident.kind, Incident.cause, Incident.status, classified, func.count())
            .group_by(Incident.cluster, Incident.kind, Incident.cause, Incident.status, classified)
        ).all()
        by_status: dict[tuple, float] = defaultdict(float)
        created: dict[tuple, float] = defaultdict(float)
        if self.cluster:
            created.update({(self.cluster, kind): 0.0 for kind in INCIDENT_KINDS})
        verdicts: dict[str, float] = defaultdict(float)
        for cluster, kind, cause, status, is_classified, n in rows:
            by_status[(_label(cluster), _label(kind), _label(cause), _label(status))] += n
            created[(_label(cluster), _label(kind))] += n
            if is_classified:
                verdicts[_label(cause)] += n
        return (
            [Sample(metric="pitstop_incidents", value=n,
                    labels=dict(zip(("cluster", "kind", "cause", "status"), key))) for key, n in by_status.items()]
            + [Sample(metric="pitstop_incidents_created", value=n, labels={"cluster": c, "kind": k})
               for (c, k), n in created.items()]
            + [Sample(metric="pitstop_classifier_verdicts", value=n, labels={"source": "incident", "cause": cause})
               for cause, n in verdicts.items()]
        )

    def _actions(self, conn: Connection) -> Reading:
        rows = conn.execute(
            select(ActionRecord.kind, ActionRecord.state, func.count()).group_by(ActionRecord.kind, ActionRecord.state)
        ).all()
        finished = {s.value for s in FINISHED}
        counted: dict[tuple[str, str], float] = {(k.value, o): 0.0 for k in ActionKind for o in sorted(finished)}
        out: Reading = []
        for kind, state, n in rows:
            out.append(Sample(metric="pitstop_actions", value=n, labels={"kind": _label(kind), "state": _label(state)}))
            if state in finished:  # a finished row never changes again: a true counter
                counted[(_label(kind), state)] = n
        return out + [Sample(metric="pitstop_actions_finished", value=n, labels={"kind": k, "outcome": o})
                      for (k, o), n in counted.items()]

    def _latency(self, conn: Connection) -> Reading:
        event_at = func.coalesce(Incident.end_time, Incident.created_at)
        acted_at = func.coalesce(ActionRecord.started_at, ActionRecord.finished_at)
        raw = seconds_between(conn.dialect.name, acted_at, event_at)
        # an event stamped by a host whose clock runs ahead reads as negative: count it as 0 s
        # Each latency is computed once (MATERIALIZED: SQLite would otherwise inline the
        # expression into every bucket's sum, two julianday() per bucket per row).
        acted = (select(ActionRecord.kind.label("kind"), case((raw < 0, 0.0), else_=raw).label("latency"))
                 .join(Incident, Incident.id == ActionRecord.incident_id)
                 .where(ActionRecord.state.in_(ACTED), acted_at.is_not(None))
                 .cte("acted").prefix_with("MATERIALIZED"))
        bucket_counts = [func.sum(case((acted.c.latency <= b, 1), else_=0)) for b in self.buckets]
        rows = conn.execute(
            select(acted.c.kind, func.count(), func.sum(acted.c.latency), *bucket_counts).group_by(acted.c.kind)
        ).all()
        seen = {_label(kind): (n, total, counts) for kind, n, total, *counts in rows}
        for kind in ActionKind:
            seen.setdefault(kind.value, (0, 0.0, [0] * len(self.buckets)))
        return [
            HistogramSample(metric="pitstop_event_to_action_seconds", labels={"kind": kind},
                            buckets=[(b, float(c or 0)) for b, c in zip(self.buckets, counts)],
                            count=float(n), sum=float(total or 0.0))
            for kind, (n, total, counts) in seen.items()
        ]

    def _nodes(self, conn: Connection) -> Reading:
        rows = conn.execute(
            select(NodeRecord.cluster, NodeRecord.state, NodeRecord.drain_owner, func.count())
            .group_by(NodeRecord.cluster, NodeRecord.state, NodeRecord.drain_owner)
        ).all()
        lemons = conn.execute(
            select(NodeRecord.cluster, func.count()).where(NodeRecord.lemon.is_(True)).group_by(NodeRecord.cluster)
        ).all()
        clusters = {_label(c) for c, *_ in rows}
        lemon_counts = {_label(c): n for c, n in lemons}
        return (
            [Sample(metric="pitstop_nodes", value=n,
                    labels={"cluster": _label(c), "state": _label(s), "drain_owner": _label(o)}) for c, s, o, n in rows]
            + [Sample(metric="pitstop_nodes_lemon", value=lemon_counts.get(c, 0), labels={"cluster": c})
               for c in sorted(clusters | set(lemon_counts))]
        )

    def _sweep(self, conn: Connection) -> Reading:
        since = self.clock() - timedelta(seconds=self.settings.metrics.sweep_lookback_s)
        # The window first, through the index on `at` (MATERIALIZED: unfenced, SQLite prefers
        # scanning the whole table by its cluster index for the GROUP BY).
        recent = (select(NodeEvent.id, NodeEvent.cluster, NodeEvent.node, NodeEvent.state, NodeEvent.at)
                  .where(NodeEvent.kind == "check", NodeEvent.at >= since)
                  .cte("recent_checks").prefix_with("MATERIALIZED"))
        latest = select(func.max(recent.c.id)).group_by(recent.c.cluster, recent.c.node)
        rows = conn.execute(
            select(recent.c.cluster, recent.c.state, func.count())
            .where(recent.c.id.in_(latest)).group_by(recent.c.cluster, recent.c.state)
        ).all()
        newest = conn.execute(select(recent.c.cluster, func.max(recent.c.at)).group_by(recent.c.cluster)).all()
        return (
            [Sample(metric="pitstop_sweep_nodes", value=n, labels={"cluster": _label(c), "result": _label(s)})
             for c, s, n in rows]
            + [Sample(metric="pitstop_sweep_last_check_timestamp_seconds", value=_utc(at).timestamp(),
                      labels={"cluster": _label(c)}) for c, at in newest if at is not None]
        )

    def _run_verdicts(self, conn: Connection) -> Reading:
        rows = conn.execute(select(Run.cause, func.count()).where(Run.cause.is_not(None)).group_by(Run.cause)).all()
        return [Sample(metric="pitstop_classifier_verdicts", value=n, labels={"source": "run", "cause": _label(c)})
                for c, n in rows]

    def _breakers_and_mode(self) -> Reading:
        out: Reading = []
        for b in breakers(self.store):
            out.append(Sample(metric="pitstop_breaker_open", value=1.0 if b.is_open else 0.0, labels={"scope": b.scope}))
            out.append(Sample(metric="pitstop_breaker_trips", value=b.trips, labels={"scope": b.scope}))
        policy = self.settings.policy
        mode = get_mode(self.store, default=self.settings.mode, default_canary_partitions=list(policy.canary_partitions),
                        default_canary_nodes=list(policy.canary_nodes)).mode
        out += [Sample(metric="pitstop_mode", value=1.0 if m is mode else 0.0, labels={"mode": m.value}) for m in Mode]
        return out
