"""A local Prefect server for one machine (`pitstop up`): SQLite under PITSTOP_HOME/prefect.

For more than one machine, run a PostgreSQL-backed `prefect server` and point PREFECT_API_URL
at it instead (README, "Triggers"); then `pitstop up` only serves the deployments.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from pitstop.processes import stop_process_group

START_TIMEOUT_S = 120.0


class ServerError(RuntimeError):
    """The Prefect server could not be reached or started; says where to look."""


@dataclass
class ServerHandle:
    api_url: str
    ui_url: str
    process: subprocess.Popen | None = None  # None: a server someone else runs
    log_path: Path | None = None

    def stop(self) -> None:
        if self.process is not None:
            stop_process_group(self.process, grace_s=20)  # its own session: server and workers


def healthy(api_url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url.rstrip('/')}/health", timeout=timeout_s) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, TimeoutError, ValueError):
        return False


def ui_url_for(api_url: str) -> str:
    return api_url.rstrip("/").removesuffix("/api")


def local_server_environment(prefect_home: Path, api_url: str) -> dict[str, str]:
    return {
        "PREFECT_HOME": str(prefect_home),
        "PREFECT_API_URL": api_url,
        "PREFECT_UI_URL": ui_url_for(api_url),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE": "false",
    }


def start_local_server(pitstop_home: Path, port: int) -> ServerHandle:
    api_url = f"http://127.0.0.1:{port}/api"
    if healthy(api_url):
        return ServerHandle(api_url, ui_url_for(api_url))  # already up (an earlier `pitstop up`)
    prefect_home = pitstop_home / "prefect"
    prefect_home.mkdir(parents=True, exist_ok=True)
    log_path = pitstop_home / "log" / "prefect-server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    prefect_bin = Path(sys.executable).with_name("prefect")
    argv = [str(prefect_bin) if prefect_bin.exists() else "prefect", "server", "start",
            "--host", "127.0.0.1", "--port", str(port), "--analytics-off"]
    env = {**os.environ, **local_server_environment(prefect_home, api_url)}
    with log_path.open("ab") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    handle = ServerHandle(api_url, ui_url_for(api_url), proc, log_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise ServerError(
                f"the local Prefect server exited with status {proc.returncode} "
                f"(is port {port} taken? set PITSTOP_TRIGGERS__SERVER_PORT); log {log_path}:\n{tail}"
            )
        if healthy(api_url):
            return handle
        time.sleep(0.5)
    handle.stop()
    raise ServerError(f"the local Prefect server did not answer on {api_url} within "
                      f"{START_TIMEOUT_S:.0f} s; see {log_path}")


def ensure_server(configured_url: str | None, pitstop_home: Path, port: int) -> ServerHandle:
    """Use the configured Prefect API if any (it must answer), else start a local one."""
    if configured_url:
        if not healthy(configured_url, timeout_s=5.0):
            raise ServerError(
                f"Prefect API {configured_url} does not answer /health. Start that server, or "
                "unset PREFECT_API_URL / triggers.prefect_api_url to let `pitstop up` run a local one"
            )
        return ServerHandle(configured_url.rstrip("/"), ui_url_for(configured_url))
    return start_local_server(pitstop_home, port)
