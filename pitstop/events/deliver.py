"""Deliver spooled events to Prefect's events API (`POST {PREFECT_API_URL}/events`).

Plain urllib on purpose: importing prefect costs ~2 s and this runs inside Slurm hooks. The body
is a JSON list of events (prefect.server.api.events.create_events). The server stores events
with ON CONFLICT DO NOTHING and its trigger service skips event ids it has already seen, so
re-sending a spooled event after a lost reply is safe.
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from pitstop.events.spool import Spool, SpooledFile

BATCH_SIZE = 50


class DeliveryError(RuntimeError):
    """Delivery failed. `retryable` False means the server refused the event itself."""

    def __init__(self, message: str, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


def resolve_api_url(configured: str | None) -> str | None:
    url = configured or os.environ.get("PREFECT_API_URL")
    return url.rstrip("/") if url else None


class PrefectEventsClient:
    """The two calls Pitstop makes to Prefect's events API, with a hard per-request timeout."""

    def __init__(self, api_url: str, timeout_s: float) -> None:
        self.api_url = api_url.rstrip("/")
        self.timeout_s = timeout_s

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "User-Agent": "pitstop-events"}
        key = os.environ.get("PREFECT_API_KEY")
        auth = os.environ.get("PREFECT_API_AUTH_STRING")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        elif auth:
            headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
        return headers

    def _post(self, path: str, body: object) -> bytes:
        request = urllib.request.Request(
            self.api_url + path,
            data=json.dumps(body).encode("utf-8"),
            headers=self._headers(),
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read(500).decode("utf-8", "replace").strip()
            retryable = exc.code >= 500 or exc.code in {401, 403, 404, 408, 429}
            raise DeliveryError(
                f"Prefect API {self.api_url}{path} answered HTTP {exc.code}: {detail or exc.reason}",
                retryable=retryable,
            ) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DeliveryError(f"Prefect API {self.api_url} unreachable: {reason}") from None

    def send(self, events: list[dict]) -> None:
        self._post("/events", events)

    def query(
        self, event_names: list[str], since_iso: str, ids: list[str] | None = None, limit: int = 50
    ) -> list[dict]:
        """Events by name (and id) since a time, via POST /events/filter (the server caps limit at 50)."""
        flt: dict = {"event": {"name": event_names}, "occurred": {"since": since_iso}}
        if ids:
            flt["id"] = {"id": ids}
        body = {"filter": flt, "limit": min(limit, 50)}
        return json.loads(self._post("/events/filter", body) or b"{}").get("events", [])


@dataclass
class FlushReport:
    delivered: int = 0
    pending: int = 0
    quarantined: int = 0
    skipped_locked: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        if self.skipped_locked:
            return "another deliverer is running; events stay spooled for it"
        text = f"delivered {self.delivered}, still pending {self.pending}"
        if self.quarantined:
            text += f", refused {self.quarantined} (see spool/bad/)"
        if self.errors:
            text += f"; last error: {self.errors[-1]}"
        return text


def _send_batch(
    spool: Spool, client: PrefectEventsClient, batch: list[SpooledFile], keep: int, report: FlushReport
) -> bool:
    """Send one batch; returns False when the server is unreachable (stop for now)."""
    try:
        client.send([f.event.to_api() for f in batch])
    except DeliveryError as exc:
        if exc.retryable:
            report.errors.append(str(exc))
            return False
        if len(batch) > 1:  # find the one the server refuses; deliver the rest
            return all(_send_batch(spool, client, [f], keep, report) for f in batch)
        spool.quarantine(batch[0].path, str(exc))
        report.quarantined += 1
        return True
    for f in batch:
        spool.mark_sent(f.path, keep)
    report.delivered += len(batch)
    return True


def flush(
    spool: Spool,
    client: PrefectEventsClient | None,
    keep_sent: int,
    deadline: float | None = None,
    wait_for_lock: bool = False,
) -> FlushReport:
    """Deliver pending events oldest first until done, unreachable, or past `deadline` (monotonic)."""
    report = FlushReport()
    if client is None:
        report.pending = len(spool.pending_paths())
        report.errors.append("no Prefect API configured (PREFECT_API_URL or PITSTOP_TRIGGERS__PREFECT_API_URL)")
        return report
    with spool.delivery_lock(wait=wait_for_lock) as locked:
        if not locked:
            report.skipped_locked = True
            report.pending = len(spool.pending_paths())
            return report
        batch: list[SpooledFile] = []
        for item in spool.iter_pending():
            batch.append(item)
            if len(batch) < BATCH_SIZE:
                continue
            if not _send_batch(spool, client, batch, keep_sent, report):
                break
            batch = []
            if deadline is not None and time.monotonic() > deadline:
                break
        else:
            if batch:
                _send_batch(spool, client, batch, keep_sent, report)
        report.pending = len(spool.pending_paths())
    return report


def deliver_forever(
    spool: Spool | Callable[[], list[Spool]],
    client: PrefectEventsClient,
    keep_sent: int,
    interval_s: float,
    stop,  # threading.Event
    on_report=None,
) -> None:
    """`pitstop up`'s background deliverer: flush every `interval_s` until `stop` is set.
    `spool` may be a callable giving the spools to flush each time (fallback spools appear
    whenever a hook could not write PITSTOP_HOME)."""
    while not stop.is_set():
        for one in (spool() if callable(spool) else [spool]):
            try:
                report = flush(one, client, keep_sent=keep_sent, wait_for_lock=False)
                if on_report is not None and (report.delivered or report.quarantined):
                    on_report(report)
            except Exception as exc:  # keep the loop alive; the spool keeps the events
                if on_report is not None:
                    on_report(FlushReport(errors=[f"{type(exc).__name__}: {exc}"]))
        stop.wait(interval_s)
