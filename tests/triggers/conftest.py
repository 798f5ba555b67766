"""Helpers for the trigger tests: recorded Slurm hook environments, a closed port."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO_ROOT

TRIGGER_FIXTURES = FIXTURES / "triggers"
PITSTOP_BIN = REPO_ROOT / ".venv" / "bin" / "pitstop"


def read_env_fixture(name: str) -> dict[str, str]:
    """A `env | sort` dump recorded inside a real Slurm hook."""
    env: dict[str, str] = {}
    for line in (TRIGGER_FIXTURES / name).read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            env[key] = value
    return env


def closed_port_url() -> str:
    """An API URL nobody listens on: bind a port, then release it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/api"


@pytest.fixture
def hook_env_base(isolated_home: Path) -> dict[str, str]:
    """What a Slurm hook wrapper passes: no PATH, just PITSTOP_HOME (+ PREFECT_API_URL)."""
    return {"PITSTOP_HOME": str(isolated_home)}


@pytest.fixture(scope="session")
def warm_prefect(prefect_server):
    """The shared server, after one event has gone through it (a fresh server's first POST
    /events imports its event pipeline and can take seconds; a running site's server is warm)."""
    import time
    from datetime import datetime, timezone

    from pitstop.events.deliver import PrefectEventsClient

    client = PrefectEventsClient(prefect_server.api_url, timeout_s=60.0)
    started = time.monotonic()
    client.send([{
        "id": "00000000-0000-4000-8000-000000000001",
        "occurred": datetime.now(timezone.utc).isoformat(),
        "event": "pitstop.test.warmup",
        "resource": {"prefect.resource.id": "pitstop.test.warmup"},
    }])
    print(f"first POST /events took {time.monotonic() - started:.2f} s")
    return prefect_server


class PrefectRest:
    """Just enough of Prefect's REST API to check what a test caused, without importing prefect."""

    def __init__(self, api_url: str) -> None:
        self.api_url = api_url.rstrip("/")

    def post(self, path: str, body: dict) -> object:
        import json
        import urllib.request

        request = urllib.request.Request(
            self.api_url + path, data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    def deployment(self, flow_name: str, name: str) -> dict | None:
        found = self.post("/deployments/filter", {
            "flows": {"name": {"any_": [flow_name]}}, "deployments": {"name": {"any_": [name]}},
        })
        return found[0] if found else None

    def flow_runs(self, deployment_id: str) -> list[dict]:
        return self.post("/flow_runs/filter", {
            "deployments": {"id": {"any_": [deployment_id]}}, "limit": 200,
        })

    def automations(self) -> list[dict]:
        return self.post("/automations/filter", {})

    def cancel_leftover_runs(self) -> int:
        """Cancel the runs of Pitstop's deployments still waiting for a worker. The server is
        shared by the session and automations outlive the `pitstop up` that made them, so an
        earlier test's event (a fake job 90002, a demo job 1000) leaves a scheduled run that the
        next test's fresh `pitstop up` would pick up and remediate against its own cluster.
        A restart test keeps them: that they survive a restart is what it checks."""
        waiting = self.post("/flow_runs/filter", {
            "deployments": {"name": {"any_": ["post-failure", "node-alarm", "health-sweep"]}},
            "flow_runs": {"state": {"type": {"any_": ["SCHEDULED", "PENDING"]}}}, "limit": 200,
        })
        for run in waiting:
            self.post(f"/flow_runs/{run['id']}/set_state", {
                "state": {"type": "CANCELLED", "name": "Cancelled", "message": "left over by an earlier test"},
                "force": True,
            })
        return len(waiting)
