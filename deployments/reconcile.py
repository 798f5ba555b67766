"""Reconciliation against a real Prefect server and Pitstop's store: the thin I/O around
pitstop.reconcile.plan.

One pass reads, for a bounded look-back window:
  - the routed events Prefect stored (`POST /api/events/filter`, paged),
  - the flow runs of the routed deployments (and of every unfinished incident, however old),
  - the incidents in the store, each with the state of its incident lock;
then plans (pure) and carries the plan out: mark dead busy runs Crashed, create the missing
runs with `create_flow_run_from_deployment` (same parameters as the automation, an
idempotency key per subject and attempt, tag `pitstop-reconciled`).

`pitstop reconcile` runs one pass (for cron); `pitstop up` runs `reconcile_forever`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from urllib.parse import parse_qs, urlparse

from pydantic import BaseModel, Field
from sqlmodel import col, or_, select

from pitstop.config import Settings
from pitstop.reconcile.model import STUCK_STATUSES, KnownIncident, KnownRun, Limits, Plan, Route, SeenEvent
from pitstop.reconcile.plan import plan
from pitstop.store import Store
from pitstop.store.locks import incident_locks
from pitstop.store.tables import Incident

from deployments.serve import EVENT_ROUTES

RECONCILED_TAG = "pitstop-reconciled"
RUNS_PAGE = 200
MAX_EVENT_PAGES = 400  # 20,000 events: far beyond one look-back window of a sane cluster
INCIDENT_MARGIN = timedelta(minutes=10)  # incidents are opened after their event occurred


class ReconcileError(RuntimeError):
    """Prefect or the store could not be read; nothing was started. The message says which."""


class ReconcileReport(BaseModel):
    plan: Plan
    started: list[str] = Field(default_factory=list, description="one line per run started")
    crashed: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    events: int = 0
    runs: int = 0
    incidents: int = 0
    dry_run: bool = False

    @property
    def summary(self) -> str:
        p = self.plan
        verb = "would start" if self.dry_run else "started"
        text = (f"reconcile: {self.events} events, {self.runs} runs, {self.incidents} incidents looked at; "
                f"{verb} {len(p.start)}, marked crashed {len(p.crash)}, gave up on {len(p.give_up)}, "
                f"in flight {p.in_flight}, settled {p.settled}, too young {p.young}")
        return text + (f"; {len(self.errors)} error(s): {self.errors[-1]}" if self.errors else "")

    @property
    def lines(self) -> list[str]:
        prefix = "would start" if self.dry_run else "started"
        out = [self.summary]
        out += [f"  {prefix} {s}" for s in self.started]
        out += [f"  marked crashed {c}" for c in self.crashed]
        out += [f"  GAVE UP {g.subject}" + (f" (incident {g.incident_id})" if g.incident_id else "") + f": {g.why}"
                for g in self.plan.give_up]
        out += [f"  note: {n}" for n in self.plan.notes]
        out += [f"  error: {e}" for e in self.errors]
        return out


def routes(name_suffix: str = "") -> list[Route]:
    return [Route(flow=r.deployment, deployment=r.deployment + name_suffix, event=r.event, parameters=r.parameters,
                  match=r.match or {"prefect.resource.id": "pitstop.*"}) for r in EVENT_ROUTES]


def limits_from(settings: Settings) -> Limits:
    t = settings.triggers
    return Limits(grace_s=t.reconcile_grace_s, stale_s=t.reconcile_stale_s, max_attempts=t.reconcile_max_attempts)


# --- reading --------------------------------------------------------------------------------


def read_events(client, names: list[str], since: datetime, until: datetime) -> list[SeenEvent]:
    body = {"filter": {"event": {"name": names},
                       "occurred": {"since": since.isoformat(), "until": until.isoformat()}},
            "limit": 50}
    response = client.request("POST", "/events/filter", json=body)
    response.raise_for_status()
    events: list[SeenEvent] = []
    for _ in range(MAX_EVENT_PAGES):
        page = response.json()
        events += [SeenEvent.model_validate(e) for e in page.get("events", [])]
        token = parse_qs(urlparse(page.get("next_page") or "").query).get("page-token")
        if not token:
            return events
        response = client.request("GET", "/events/filter/next", params={"page-token": token[0]})
        response.raise_for_status()
    raise ReconcileError(f"more than {MAX_EVENT_PAGES * 50} events in the look-back window; "
                         "shorten triggers.reconcile_lookback_s")


def _known_run(flow_run, deployment_names: dict[str, str]) -> KnownRun | None:
    deployment_id = str(flow_run.deployment_id) if flow_run.deployment_id else None
    if deployment_id not in deployment_names or flow_run.state is None:
        return None
    return KnownRun(
        id=str(flow_run.id), deployment=deployment_names[deployment_id], deployment_id=deployment_id,
        parameters=dict(flow_run.parameters or {}), state=str(flow_run.state.type.value).upper(),
        state_since=flow_run.state.timestamp, created=flow_run.created,
    )


def read_runs(client, deployment_names: dict[str, str], since: datetime, ids: list[str]) -> list[KnownRun]:
    """Runs of the routed deployments expected to start since `since`, plus the runs `ids`."""
    from uuid import UUID

    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterExpectedStartTime,
        FlowRunFilterId,
    )
    from prefect.client.schemas.sorting import FlowRunSort

    found: dict[str, KnownRun] = {}
    deployments = DeploymentFilter(id=DeploymentFilterId(any_=[UUID(d) for d in deployment_names]))
    window = FlowRunFilter(expected_start_time=FlowRunFilterExpectedStartTime(after_=since))
    offset = 0
    while True:
        page = client.read_flow_runs(flow_run_filter=window, deployment_filter=deployments,
                                     sort=FlowRunSort.EXPECTED_START_TIME_ASC, limit=RUNS_PAGE, offset=offset)
        for fr in page:
            known = _known_run(fr, deployment_names)
            if known is not None:
                found[known.id] = known
        if len(page) < RUNS_PAGE:
            break
        offset += RUNS_PAGE
    missing = [i for i in ids if i not in found]
    for start in range(0, len(missing), RUNS_PAGE):
        chunk = [UUID(i) for i in missing[start:start + RUNS_PAGE]]
        for fr in client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=chunk))):
            known = _known_run(fr, deployment_names)
            if known is not None:
                found[known.id] = known
    return list(found.values())


def read_incidents(store: Store, home, since: datetime) -> list[KnownIncident]:
    """Incidents opened in the window, and every unfinished one (with its lock's state)."""
    query = select(Incident).where(or_(col(Incident.created_at) >= since,
                                       col(Incident.status).in_(sorted(STUCK_STATUSES))))
    with store.session() as session:
        rows = list(session.exec(query))
    locks = incident_locks(store, home)  # PostgreSQL: every host's locks; SQLite: this host's files
    out = []
    for row in rows:
        lock = locks.state(row.id) if row.status in STUCK_STATUSES else "unknown"
        out.append(KnownIncident(
            id=row.id, kind=row.kind, cluster=row.cluster, job_id=row.job_id, node=row.node,
            idem_key=row.idem_key, end_time=row.end_time, status=row.status, flow_run_id=row.flow_run_id,
            created_at=row.created_at, lock=lock,
        ))
    return out


def deployment_ids(client, route_list: list[Route]) -> dict[str, str]:
    """deployment id -> route deployment name, for the routed deployments that exist."""
    from prefect.exceptions import ObjectNotFound

    out = {}
    for route in route_list:
        try:
            deployment = client.read_deployment_by_name(f"{route.flow}/{route.deployment}")
        except ObjectNotFound:
            continue
        out[str(deployment.id)] = route.deployment
    return out


# --- one pass -------------------------------------------------------------------------------


def reconcile_once(settings: Settings, client, store: Store, *, now: datetime | None = None,
                   dry_run: bool = False, lookback_s: float | None = None, name_suffix: str = "") -> ReconcileReport:
    """Read, plan, act. Raises ReconcileError when Prefect or the store cannot be read."""
    now = now or datetime.now(timezone.utc)
    lookback = timedelta(seconds=lookback_s if lookback_s is not None else settings.triggers.reconcile_lookback_s)
    since = now - lookback
    route_list = routes(name_suffix)
    try:
        names = deployment_ids(client, route_list)
        if not names:
            raise ReconcileError("Pitstop's deployments are not registered on this Prefect server yet "
                                 "(`pitstop up` registers them)")
        incidents = read_incidents(store, settings.home, since - INCIDENT_MARGIN)
        stuck = [i for i in incidents if i.status in STUCK_STATUSES]
        oldest = min([since, *(_aware(i.created_at) - INCIDENT_MARGIN for i in stuck)])
        runs = read_runs(client, names, oldest, [i.flow_run_id for i in stuck if i.flow_run_id])
        events = read_events(client, sorted({r.event for r in route_list}), since, now)
    except ReconcileError:
        raise
    except Exception as exc:
        raise ReconcileError(f"could not read what happened ({type(exc).__name__}: {exc})") from exc
    decided = plan(route_list, events, runs, incidents, now, limits_from(settings))
    report = ReconcileReport(plan=decided, events=len(events), runs=len(runs), incidents=len(incidents),
                             dry_run=dry_run)
    by_name = {name: dep_id for dep_id, name in names.items()}
    for start in decided.start:
        label = f"{start.deployment} for {start.subject}" + (f" (incident {start.incident_id})" if start.incident_id else "")
        if dry_run:
            report.started.append(f"{label}: {start.why}")
            continue
        deployment_id = start.deployment_id or by_name.get(start.deployment)
        try:
            created = client.create_flow_run_from_deployment(
                deployment_id, parameters=start.parameters, idempotency_key=start.idempotency_key,
                tags=[RECONCILED_TAG])
        except Exception as exc:
            report.errors.append(f"could not start {label}: {type(exc).__name__}: {exc}")
            continue
        report.started.append(f"flow run {created.id} of {label}: {start.why}")
    if not dry_run:
        _mark_crashed(client, decided, report)
    return report


def _mark_crashed(client, decided: Plan, report: ReconcileReport) -> None:
    from prefect.states import Crashed

    for crash in decided.crash:
        try:
            client.set_flow_run_state(crash.flow_run_id, Crashed(message=crash.why), force=True)
            report.crashed.append(f"flow run {crash.flow_run_id}: {crash.why}")
        except Exception as exc:
            report.errors.append(f"could not mark flow run {crash.flow_run_id} crashed: {type(exc).__name__}: {exc}")


def _aware(dt: datetime) -> datetime:
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt


def run_once(settings: Settings, *, dry_run: bool = False, lookback_s: float | None = None) -> ReconcileReport:
    """One pass with its own Prefect client and store (PREFECT_API_URL must be set)."""
    from prefect.client.orchestration import get_client

    store = Store.from_settings(settings)
    try:
        with get_client(sync_client=True) as client:
            return reconcile_once(settings, client, store, dry_run=dry_run, lookback_s=lookback_s)
    finally:
        store.dispose()


def reconcile_forever(settings: Settings, stop: threading.Event,
                      on_message: Callable[[str], None] | None = None) -> None:
    """`pitstop up`'s loop: a pass every triggers.reconcile_interval_s, the first ones soon after
    start (a restart after `kill -9` resumes what the killed process left half done)."""
    from prefect.client.orchestration import get_client

    say = on_message or (lambda _m: None)
    interval = settings.triggers.reconcile_interval_s
    wait = min(interval, 5.0)
    store = Store.from_settings(settings)
    last_quiet = ""
    try:
        with get_client(sync_client=True) as client:
            while not stop.wait(wait):
                try:
                    report = reconcile_once(settings, client, store)
                except ReconcileError as exc:
                    if str(exc) != last_quiet:  # say it once, not every pass
                        say(f"reconcile: {exc}")
                    last_quiet = str(exc)
                    wait = min(interval, 5.0) if "not registered" in str(exc) else interval
                    continue
                except Exception as exc:  # a bug must not end the loop: the next pass may do
                    say(f"reconcile: internal error, trying again in {interval:g} s: {type(exc).__name__}: {exc}")
                    wait = interval
                    continue
                last_quiet = ""
                wait = interval
                p = report.plan
                if p.start or p.crash or p.give_up or report.errors:
                    for line in report.lines:
                        say(line)
    finally:
        store.dispose()
