"""Start `pitstop up` as a real process against the session's Prefect server and wait until it
serves (its deployments registered, its automations loaded)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.triggers.conftest import PITSTOP_BIN, PrefectRest

NO_SWEEP_CRON = "0 0 1 1 *"  # keep the scheduled sweep out of the way of these tests


def up_env(home: Path, api_url: str, **settings: str) -> dict[str, str]:
    """`pitstop up`'s environment; `settings` are PITSTOP_* names without the prefix."""
    env = {
        **os.environ, "PITSTOP_HOME": str(home), "PITSTOP_CLUSTER": "demo", "PREFECT_API_URL": api_url,
        "PITSTOP_TRIGGERS__HEALTH_SWEEP_CRON": NO_SWEEP_CRON, "PITSTOP_TRIGGERS__RUNNER_POLL_S": "1",
        "PITSTOP_TRIGGERS__FLUSH_INTERVAL_S": "1",
    }
    env.update({f"PITSTOP_{k}": v for k, v in settings.items()})
    return env


def start_up(env: dict[str, str], log_path: Path, rest: PrefectRest, timeout_s: float = 120,
             restart: bool = False) -> subprocess.Popen:
    """`restart=True` keeps the runs still waiting on the server (the previous `pitstop up`'s);
    a first start against the shared server cancels them (another test's, see
    PrefectRest.cancel_leftover_runs). A `pitstop up` that starts its own server has none."""
    if not restart and env.get("PREFECT_API_URL"):
        rest.cancel_leftover_runs()
    before = log_path.read_bytes() if log_path.exists() else b""
    log = log_path.open("ab")
    proc = subprocess.Popen([str(PITSTOP_BIN), "up"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    log.close()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        ready = log_path.read_bytes()[len(before):].count(b"ready: ") > 0
        if ready and rest.deployment("post-failure", "post-failure") and any(
                a["name"].startswith("pitstop: pitstop.job.ended") for a in rest.automations()):
            time.sleep(1)  # the automation service loads a new automation within a moment
            return proc
        time.sleep(0.5)
    raise AssertionError(f"pitstop up did not become ready:\n{log_path.read_text(errors='replace')[-3000:]}")


def patch(api_url: str, path: str, body: dict, attempts: int = 10) -> None:
    """PATCH, retried while the server answers 503 (SQLite busy: the very thing Pitstop's
    reconciliation exists for)."""
    for attempt in range(attempts):
        request = urllib.request.Request(api_url.rstrip("/") + path, data=json.dumps(body).encode(),
                                         method="PATCH", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30):
                return
        except urllib.error.HTTPError as exc:
            if exc.code != 503 or attempt == attempts - 1:
                raise
            time.sleep(1)


def job_automation(rest: PrefectRest) -> dict:
    return next(a for a in rest.automations() if a["name"].startswith("pitstop: pitstop.job.ended"))
