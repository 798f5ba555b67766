"""Run event-triggered flow runs inside `pitstop up`'s process, seconds sooner.

Prefect's runner starts every flow run in a freshly spawned interpreter, which re-imports
prefect, the flows and their tasks: ~4-5 s per run on a small machine, most of the latency from a
job's end to the operator's mail. With the fast lane on, `pitstop up` registers the
event-triggered deployments itself and this lane executes them: it polls their scheduled runs
every `triggers.fast_lane_poll_s`, claims a run the way the runner does (proposing Pending: the
server lets exactly one claimer through), and runs it in a thread of this process, where
everything is imported already. The run is the same Prefect flow run (same id, states, logs,
UI link). Prefect's runner serves the rest (the health_sweep schedule). When every thread is
busy (runs paused for approval hold one each), new runs wait in Scheduled until one frees.
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
    """Starts the scheduled runs of `deployment_flows` in threads of this process."""

    def __init__(self, deployment_flows: dict[UUID, Flow], poll_s: float, workers: int) -> None:
        self.deployment_flows = deployment_flows
        self.poll_s = poll_s
        self.workers = workers
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pitstop-fast-lane")
        self.free = threading.BoundedSemaphore(workers)
        self._said_full = False

    def _claim(self, client, flow_run_id: UUID) -> bool:
        """Scheduled -> Pending; the server accepts exactly one claimer (as for Prefect's runner)."""
        from prefect.states import Pending

        try:
            result = client.set_flow_run_state(flow_run_id, Pending())
        except Exception as exc:
            log.warning("could not claim flow run %s: %s", flow_run_id, exc)
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
        # This endpoint also marks the deployments as polled, so the UI shows them Ready.
        due = client.get_scheduled_flow_runs_for_deployments(
            list(self.deployment_flows), scheduled_before=datetime.now(timezone.utc), limit=20
        )
        started = 0
        for flow_run in due:
            if not self.free.acquire(blocking=False):
                # runs stay Scheduled and start as threads free up (e.g. runs paused for approval)
                if on_message is not None and not self._said_full:
                    on_message(f"fast lane: all {self.workers} workers busy; runs wait their turn "
                               "(raise triggers.fast_lane_workers)")
                self._said_full = True
                break
            self._said_full = False
            if not self._claim(client, flow_run.id):
                self.free.release()
                continue
            try:
                claimed = client.read_flow_run(flow_run.id)
            except Exception:
                self.free.release()
                raise
            if on_message is not None:
                on_message(f"fast lane: started flow run {flow_run.id} "
                           f"(parameters {sorted(claimed.parameters)})")
            self.pool.submit(self._run, self.deployment_flows[claimed.deployment_id], claimed)
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
