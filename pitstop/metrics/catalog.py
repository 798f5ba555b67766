"""Every metric Pitstop exports, as data: name, type, labels, help.

A source returns samples by name; the collector turns them into families from this table, so a
new metric is one row here plus the code that measures it. The dashboard test checks its
queries against `series_names()`.

Counters are used only where the number can never go down: finished journal rows never change
(compare-and-set in pitstop.store.records), incident rows are never deleted. Everything whose
label can move (an incident's cause once classified, an action's state) is a gauge.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel


class Kind(StrEnum):
    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


class MetricSpec(BaseModel):
    name: str
    kind: Kind
    labels: tuple[str, ...] = ()
    help: str


# Suffixes Prometheus' text format adds to a family's name (exposition format docs,
# https://prometheus.io/docs/instrumenting/exposition_formats/).
SERIES_SUFFIXES: dict[Kind, tuple[str, ...]] = {
    Kind.GAUGE: ("",),
    Kind.COUNTER: ("_total",),
    Kind.HISTOGRAM: ("_bucket", "_sum", "_count"),
}

G, C, H = Kind.GAUGE, Kind.COUNTER, Kind.HISTOGRAM

METRICS: tuple[MetricSpec, ...] = (
    # --- the store (incidents, action journal, nodes, breakers, mode, sweeps, verdicts)
    MetricSpec(name="pitstop_incidents", kind=G, labels=("cluster", "kind", "cause", "status"),
               help="Incidents recorded, by current verdict cause and status"),
    MetricSpec(name="pitstop_incidents_created", kind=C, labels=("cluster", "kind"),
               help="Incidents ever recorded (job failures and node alarms)"),
    MetricSpec(name="pitstop_actions", kind=G, labels=("kind", "state"),
               help="Action journal rows by state now (intended, running, awaiting_approval, finished ones)"),
    MetricSpec(name="pitstop_actions_finished", kind=C, labels=("kind", "outcome"),
               help="Actions finished, by outcome (done, failed, skipped, would_do, denied)"),
    MetricSpec(name="pitstop_event_to_action_seconds", kind=H, labels=("kind",),
               help="From the event (job end, else incident creation) to the action's start "
                    "(done, failed or would_do actions)"),
    MetricSpec(name="pitstop_nodes", kind=G, labels=("cluster", "state", "drain_owner"),
               help="Nodes as Pitstop last recorded them, by Slurm state+flags and drain owner"),
    MetricSpec(name="pitstop_nodes_lemon", kind=G, labels=("cluster",),
               help="Nodes flagged as lemons / repeat offenders"),
    MetricSpec(name="pitstop_breaker_open", kind=G, labels=("scope",),
               help="1 while the storm-guard circuit breaker is open (only a human closes it)"),
    MetricSpec(name="pitstop_breaker_trips", kind=C, labels=("scope",),
               help="Times the circuit breaker tripped"),
    MetricSpec(name="pitstop_mode", kind=G, labels=("mode",),
               help="1 for the remediation mode in force (observe, canary, act)"),
    MetricSpec(name="pitstop_sweep_nodes", kind=G, labels=("cluster", "result"),
               help="Nodes by their latest health-sweep result (OK, WARN, FAIL, UNREACHABLE) "
                    "within metrics.sweep_lookback_s"),
    MetricSpec(name="pitstop_sweep_last_check_timestamp_seconds", kind=G, labels=("cluster",),
               help="Unix time of the newest health-sweep node check"),
    MetricSpec(name="pitstop_classifier_verdicts", kind=G, labels=("source", "cause"),
               help="Classifier verdicts by cause: source=run (pitstop run), incident (flows; "
                    "not-yet-classified incidents left out)"),
    # --- the event spool
    MetricSpec(name="pitstop_spool_events", kind=G, labels=("spool", "state"),
               help="Event files in each spool directory (pending, sent, bad)"),
    MetricSpec(name="pitstop_spool_oldest_pending_age_seconds", kind=G, labels=("spool",),
               help="Age of the oldest event waiting for delivery (0 when none waits)"),
    # --- the cluster adapter (live scheduler view)
    MetricSpec(name="pitstop_cluster_nodes", kind=G, labels=("cluster", "state", "drain_owner"),
               help="Nodes as the scheduler shows them now, by state+flags and drain owner"),
    # --- Prefect (health-sweep flow runs)
    MetricSpec(name="pitstop_sweep_last_duration_seconds", kind=G,
               help="Run time of the last finished health-sweep flow run"),
    MetricSpec(name="pitstop_sweep_last_end_timestamp_seconds", kind=G,
               help="Unix time the last finished health-sweep flow run ended"),
    MetricSpec(name="pitstop_sweep_last_succeeded", kind=G,
               help="1 if the last finished health-sweep flow run completed, 0 if it failed or crashed"),
    # --- the scrape itself
    MetricSpec(name="pitstop_source_up", kind=G, labels=("source",),
               help="1 if the source answered within metrics.source_timeout_s in this scrape"),
    MetricSpec(name="pitstop_source_duration_seconds", kind=G, labels=("source",),
               help="How long the source took in this scrape (the time box when it did not answer)"),
)

BY_NAME: dict[str, MetricSpec] = {m.name: m for m in METRICS}


def series_names() -> set[str]:
    """The names that appear in the exposition (a counter's `_total`, a histogram's parts)."""
    return {m.name + suffix for m in METRICS for suffix in SERIES_SUFFIXES[m.kind]}
