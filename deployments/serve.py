"""Pitstop's Prefect deployments: which event starts which flow, and when health_sweep runs.

The wiring is a table (`EVENT_ROUTES`): event name, the resource labels it must carry, the flow
deployment it starts and the flow parameters templated from the event. Prefect turns each
route into an automation (a `DeploymentEventTrigger`) when the deployments are served.

Event payloads are made by `pitstop.events.models` (JobEnded / NodeAlarm); a single-expression
template such as "{{ event.payload }}" is rendered as JSON by Prefect, so `facts` and `details`
arrive as dicts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prefect import Flow
from prefect.deployments.runner import RunnerDeployment
from prefect.events import DeploymentEventTrigger

from pitstop.config import Settings
from pitstop.events.models import JOB_ENDED, NODE_ALARM

TAGS = ["pitstop"]


@dataclass(frozen=True)
class EventRoute:
    deployment: str
    event: str
    match: dict[str, str]
    parameters: dict[str, Any]
    description: str


@dataclass(frozen=True)
class FlowSet:
    """The three flows; resolved lazily so importing this module does not import every task."""

    post_failure: Flow
    node_alarm: Flow
    health_sweep: Flow
    extra: dict[str, Flow] = field(default_factory=dict)


EVENT_ROUTES: tuple[EventRoute, ...] = (
    EventRoute(
        deployment="post-failure",
        event=JOB_ENDED,
        # only non-success endings; the epilog labels every job.ended event with its outcome
        match={"pitstop.job.outcome": "failure"},
        parameters={
            "job_id": "{{ event.payload.job_id }}",
            "cluster": "{{ event.payload.cluster }}",
            "facts": "{{ event.payload }}",
        },
        description="A Slurm job ended badly: diagnose, decide, act, record, notify.",
    ),
    EventRoute(
        deployment="node-alarm",
        event=NODE_ALARM,
        match={},
        parameters={
            "node": "{{ event.payload.node }}",
            "alarm": "{{ event.payload.alarm }}",
            "details": "{{ event.payload.details }}",
        },
        description="A node raised an alarm (prolog check, sweep, unexplained DOWN/DRAIN).",
    ),
)


def trigger_for(route: EventRoute) -> DeploymentEventTrigger:
    return DeploymentEventTrigger(
        name=f"pitstop: {route.event} -> {route.deployment}",
        description=route.description,
        expect={route.event},
        match=route.match or {"prefect.resource.id": "pitstop.*"},
        posture="Reactive",
        threshold=1,
        within=0,
        parameters=route.parameters,
    )


def load_flows() -> FlowSet:
    from flows.health_sweep import health_sweep
    from flows.node_alarm import node_alarm
    from flows.post_failure import post_failure

    return FlowSet(post_failure=post_failure, node_alarm=node_alarm, health_sweep=health_sweep)


def health_sweep_schedule(settings: Settings) -> dict[str, Any]:
    if settings.triggers.health_sweep_cron:
        return {"cron": settings.triggers.health_sweep_cron}
    return {"interval": settings.triggers.health_sweep_interval_s}


def build_deployments(
    settings: Settings, flows: FlowSet | None = None, name_suffix: str = ""
) -> list[RunnerDeployment]:
    """Deployments to serve: one per event route, plus the scheduled health sweep."""
    flows = flows or load_flows()
    by_name: dict[str, Callable] = {
        "post-failure": flows.post_failure,
        "node-alarm": flows.node_alarm,
    }
    deployments = [
        by_name[route.deployment].to_deployment(
            name=route.deployment + name_suffix,
            triggers=[trigger_for(route)],
            tags=TAGS,
            description=route.description,
        )
        for route in EVENT_ROUTES
    ]
    deployments.append(
        flows.health_sweep.to_deployment(
            name="health-sweep" + name_suffix,
            tags=TAGS,
            description="Scheduled node checks over SSH on every node; raises node alarms.",
            **health_sweep_schedule(settings),
        )
    )
    return deployments


def serve_deployments(
    settings: Settings, deployments: list[RunnerDeployment], flows: FlowSet | None = None,
    on_message: Callable[[str], None] | None = None,
) -> None:
    """Blocks: registers the deployments and their automations, then runs what they trigger.

    With `triggers.fast_lane`, the event-triggered deployments are registered here and run in
    this process (deployments.fast_lane); Prefect's runner serves the scheduled health sweep.
    """
    import threading

    from prefect import serve

    stop = threading.Event()
    served = deployments
    if settings.triggers.fast_lane:
        from deployments.fast_lane import FastLane

        flows = flows or load_flows()
        by_route = {"post-failure": flows.post_failure, "node-alarm": flows.node_alarm}
        lane_flows = {}
        for d in deployments:
            route = next((r for r in EVENT_ROUTES if d.name.startswith(r.deployment)), None)
            if route is not None:
                lane_flows[d.apply()] = by_route[route.deployment]  # deployment + automation
        served = [d for d in deployments if not any(d.name.startswith(r.deployment) for r in EVENT_ROUTES)]
        lane = FastLane(lane_flows, poll_s=settings.triggers.fast_lane_poll_s,
                        workers=settings.triggers.fast_lane_workers)
        threading.Thread(target=lane.run_forever, args=(stop, on_message), name="pitstop-fast-lane",
                         daemon=True).start()
        if on_message is not None:
            on_message(f"ready: {len(lane_flows)} event-triggered deployments registered, fast lane on")
    try:
        serve(*served, query_seconds=settings.triggers.runner_poll_s, print_starting_message=False)
    finally:
        stop.set()
