"""The last health sweep, from Prefect: its flow run's duration, end and outcome.

The sweep's duration lives only in Prefect (the store has each node's check, not the run's
span). One `POST /flow_runs/filter` per scrape, limit 1; plain urllib like
pitstop.events.deliver, because importing prefect costs seconds.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.request
from datetime import datetime

from pitstop.metrics.samples import Reading, Sample

SWEEP_FLOW = "health-sweep"  # flows/health_sweep.py's @flow(name=...)
FINISHED_TYPES = ["COMPLETED", "FAILED", "CRASHED"]  # Prefect StateType values of a run that ended


class PrefectUnavailable(RuntimeError):
    """Prefect could not be asked; the message says where and why."""


def _headers() -> dict[str, str]:
    # the same credentials as pitstop.events.deliver.PrefectEventsClient
    headers = {"Content-Type": "application/json", "User-Agent": "pitstop-metrics"}
    key, auth = os.environ.get("PREFECT_API_KEY"), os.environ.get("PREFECT_API_AUTH_STRING")
    if key:
        headers["Authorization"] = f"Bearer {key}"
    elif auth:
        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    return headers


class PrefectSweepSource:
    name = "prefect"

    def __init__(self, api_url: str | None, timeout_s: float) -> None:
        self.api_url = api_url.rstrip("/") if api_url else None
        self.timeout_s = timeout_s

    def _last_sweep(self) -> dict | None:
        if not self.api_url:
            raise PrefectUnavailable("no Prefect API URL (set triggers.prefect_api_url or PREFECT_API_URL)")
        body = {"flows": {"name": {"any_": [SWEEP_FLOW]}},
                "flow_runs": {"state": {"type": {"any_": FINISHED_TYPES}}},
                "sort": "END_TIME_DESC", "limit": 1}
        request = urllib.request.Request(f"{self.api_url}/flow_runs/filter", data=json.dumps(body).encode(),
                                         headers=_headers(), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                runs = json.loads(response.read() or b"[]")
        except urllib.error.HTTPError as exc:
            raise PrefectUnavailable(f"Prefect API {self.api_url} answered HTTP {exc.code} to /flow_runs/filter") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise PrefectUnavailable(f"Prefect API {self.api_url} unreachable: {getattr(exc, 'reason', exc)}") from None
        except ValueError as exc:
            raise PrefectUnavailable(f"Prefect API {self.api_url} sent something that is not JSON: {exc}") from None
        if not isinstance(runs, list):
            raise PrefectUnavailable(f"Prefect API {self.api_url} answered /flow_runs/filter with {type(runs).__name__}, not a list")
        return runs[0] if runs else None

    def read(self) -> Reading:
        run = self._last_sweep()
        if run is None:
            return []  # no sweep has finished yet: absent, not zero (a 0 s sweep would be a lie)
        out: Reading = [
            Sample(metric="pitstop_sweep_last_duration_seconds", value=float(run.get("total_run_time") or 0.0)),
            Sample(metric="pitstop_sweep_last_succeeded", value=1.0 if run.get("state_type") == "COMPLETED" else 0.0),
        ]
        if run.get("end_time"):
            ended = datetime.fromisoformat(str(run["end_time"]).replace("Z", "+00:00"))
            out.append(Sample(metric="pitstop_sweep_last_end_timestamp_seconds", value=ended.timestamp()))
        return out
