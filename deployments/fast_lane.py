"""Run event-triggered flow runs inside `pitstop up`'s process, seconds sooner.

Prefect's runner starts every flow run in a freshly spawned interpreter, which re-imports
prefect, the flows and their tasks: ~4-5 s per run on a small machine, most of the latency from a
job's end to the operator's mail. The fast lane polls the same deployments' scheduled runs every
`triggers.fast_lane_poll_s`, claims a run the way the runner does (proposing Pending: the
server lets exactly one claimer through), and runs it in a thread of this process, where
everything is imported already. The run is the same Prefect flow run (same id, states, logs,
UI link). The served runner stays as the backstop: what the fast lane does not claim (all its
threads busy, say with runs paused for approval), the runner starts as usual.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from uuid import UUID

from prefect import Flow

log = logging.getLogger("pitstop.fast_lane")


class FastLane:
    def __init__(
        self,
        flows: dict[str, Flow],  # "flow-name/deployment-name" -> flow
        poll_s: float,
        workers: int,
    ) -> None:
        self.flows = flows
        self.poll_s = poll_s
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pitstop-fast-lane")
        self.free = threading.BoundedSemaphore(workers)
        self.deployment_flows: dict[UUID, Flow] = {}

    def _resolve(self, client) -> None:
        for full_name, flow in self.flows.items():
            if any(f is flow for f in self.deployment_flows.values()):
                continue
            try:
                deployment = client.read_deployment_by_name(full_name)
            except Exception:  # not registered yet: `serve` is still applying it
                continue
            self.deployment_flows[deployment.id] = flow

    def _scheduled(self, client) -> list:
        from prefect.client.schemas.filters import (
            DeploymentFilter,
            DeploymentFilterId,
            FlowRunFilter,
            FlowRunFilterNextScheduledStartTime,
            FlowRunFilterState,
            FlowRunFilterStateType,
        )
        from prefect.client.schemas.objects import StateType

        return client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED])),
                next_scheduled_start_time=FlowRunFilterNextScheduledStartTime(
                    before_=datetime.now(timezone.utc)
                ),
            ),
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=list(self.deployment_flows))),
            limit=20,
        )

    def _claim(self, client, flow_run) -> bool:
        from prefect.states import Pending

        try:
            result = client.set_flow_run_state(flow_run.id, Pending())
        except Exception as exc:
            log.warning("could not claim flow run %s: %s", flow_run.id, exc)
            return False
        return str(getattr(result.status, "value", result.status)).upper() == "ACCEPT"

    def _run(self, flow: Flow, flow_run) -> None:
        from prefect.flow_engine import run_flow

        try:
            run_flow(flow, flow_run=flow_run, parameters=flow_run.parameters, return_type="state")
        except BaseException as exc:  # the engine records the failure on the run itself
            log.warning("flow run %s (%s) ended with %s: %s", flow_run.name, flow_run.id,
                        type(exc).__name__, exc)
        finally:
            self.free.release()

    def poll_once(self, client, on_message: Callable[[str], None] | None = None) -> int:
        self._resolve(client)
        if not self.deployment_flows:
            return 0
        started = 0
        for flow_run in self._scheduled(client):
            if not self.free.acquire(blocking=False):
                break  # all threads busy: the served runner picks the rest up
            if not self._claim(client, flow_run):
                self.free.release()
                continue
            if on_message is not None:
                on_message(f"fast lane: started flow run {flow_run.id} "
                           f"(parameters {sorted(flow_run.parameters)})")
            self.pool.submit(self._run, self.deployment_flows[flow_run.deployment_id], flow_run)
            started += 1
        return started

    def run_forever(self, stop: threading.Event, on_message: Callable[[str], None] | None = None) -> None:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            while not stop.is_set():
                try:
                    self.poll_once(client, on_message)
                except Exception as exc:  # server restarting, network blip: try again next tick
                    if on_message is not None:
                        on_message(f"fast lane: {type(exc).__name__}: {exc}")
                stop.wait(self.poll_s)
        self.pool.shutdown(wait=False, cancel_futures=True)
