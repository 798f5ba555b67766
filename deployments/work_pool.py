"""Pitstop's deployments in a Prefect work pool, for `prefect worker` processes on several hosts.

`pitstop up` serves the deployments in its own process. With a work pool the server hands each
flow run to one of the pool's workers instead, wherever they run. The deployments are the same
table (`deployments.serve.EVENT_ROUTES`, same triggers), registered by module path
(`flows.post_failure.post_failure`), so a worker needs the installed Pitstop package, not this
checkout. Every worker must share Pitstop's database (PITSTOP_DATABASE_URL on PostgreSQL): the
incident, the action journal and the incident lock (pitstop.store.locks) live there, which is
what keeps two workers from remediating one incident twice.

    prefect work-pool create pitstop --type process     # or ensure_process_pool()
    python -c 'from deployments.work_pool import deploy_to_pool; ...'
    prefect worker start --pool pitstop                 # on each worker host
"""

from __future__ import annotations

from prefect.deployments.runner import RunnerDeployment
from prefect.types.entrypoint import EntrypointType

from deployments.serve import EVENT_ROUTES, TAGS, FlowSet, health_sweep_schedule, load_flows, trigger_for
from pitstop.config import Settings


def pool_deployments(settings: Settings, flows: FlowSet | None = None, name_suffix: str = "",
                     health_sweep: bool = True) -> list[RunnerDeployment]:
    """One deployment per event route (with its trigger), plus the scheduled health sweep."""
    flows = flows or load_flows()
    by_route = {"post-failure": flows.post_failure, "node-alarm": flows.node_alarm}
    out = [
        by_route[route.deployment].to_deployment(
            name=route.deployment + name_suffix, triggers=[trigger_for(route)], tags=TAGS,
            description=route.description, entrypoint_type=EntrypointType.MODULE_PATH)
        for route in EVENT_ROUTES
    ]
    if health_sweep:
        out.append(flows.health_sweep.to_deployment(
            name="health-sweep" + name_suffix, tags=TAGS, entrypoint_type=EntrypointType.MODULE_PATH,
            description="Scheduled node checks over SSH on every node; raises node alarms.",
            **health_sweep_schedule(settings)))
    return out


def ensure_process_pool(pool: str) -> None:
    """Create the work pool (type `process`) unless it exists."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    with get_client(sync_client=True) as client:
        try:
            client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
        except ObjectAlreadyExists:
            pass


def deploy_to_pool(pool: str, deployments: list[RunnerDeployment]) -> dict[str, str]:
    """Register `deployments` (and their automations) in `pool`; deployment name -> id."""
    ensure_process_pool(pool)
    return {d.name: str(d.apply(work_pool_name=pool)) for d in deployments}
