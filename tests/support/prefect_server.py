"""One real local Prefect server for the whole test session.

Ephemeral mode starts a temporary server per process (~13 s), so tests must share this one.
Request the `prefect_server` fixture; it yields the API URL and points PREFECT_API_URL at it for
the session (environment for subprocesses and threads, plus Prefect's settings context for code
that imported Prefect already). Nothing leaves 127.0.0.1, analytics are off.

Prefect itself is imported lazily: registering this plugin costs nothing for tests that do not
use the server.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pitstop.processes import stop_process_group
from tests.support.net import free_port

START_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class PrefectServer:
    api_url: str  # http://127.0.0.1:<port>/api
    ui_url: str
    home: Path
    log_path: Path
    pid: int


def _healthy(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, TimeoutError):
        return False


def server_environment(home: Path, api_url: str, ui_url: str) -> dict[str, str]:
    """The Prefect variables both the server and its clients in this session use."""
    return {
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": api_url,
        "PREFECT_UI_URL": ui_url,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE": "false",  # never start a second server by accident
        "PREFECT_LOGGING_TO_API_ENABLED": "false",  # fewer writes on a 2-core machine
        "PREFECT_CLI_PROMPT": "false",
    }


def start_prefect_server(base: Path) -> tuple[subprocess.Popen, PrefectServer]:
    home = base / "prefect-home"
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    ui_url = f"http://127.0.0.1:{port}"
    env = {**os.environ, **server_environment(home, api_url, ui_url)}
    log_path = base / "prefect-server.log"
    prefect_bin = Path(sys.executable).with_name("prefect")
    argv = [str(prefect_bin) if prefect_bin.exists() else "prefect"]
    argv += ["server", "start", "--host", "127.0.0.1", "--port", str(port), "--analytics-off"]
    log = log_path.open("wb")
    proc = subprocess.Popen(
        argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    log.close()
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"prefect server exited with {proc.returncode}:\n{tail}")
        if _healthy(api_url):
            return proc, PrefectServer(api_url, ui_url, home, log_path, proc.pid)
        time.sleep(0.5)
    stop_prefect_server(proc)
    tail = log_path.read_text(errors="replace")[-3000:]
    raise RuntimeError(f"prefect server not healthy at {api_url} after {START_TIMEOUT_S:.0f} s:\n{tail}")


def stop_prefect_server(proc: subprocess.Popen) -> None:
    stop_process_group(proc, grace_s=15)  # its own session: only the server and its children


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    proc, server = start_prefect_server(tmp_path_factory.mktemp("prefect"))
    variables = server_environment(server.home, server.api_url, server.ui_url)
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    settings_cm = contextlib.nullcontext()
    if "prefect" in sys.modules:
        # Prefect read its settings when it was imported (e.g. at test collection).
        from prefect.settings import (
            PREFECT_API_URL,
            PREFECT_SERVER_ALLOW_EPHEMERAL_MODE,
            PREFECT_UI_URL,
            temporary_settings,
        )

        settings_cm = temporary_settings(
            updates={
                PREFECT_API_URL: server.api_url,
                PREFECT_UI_URL: server.ui_url,
                PREFECT_SERVER_ALLOW_EPHEMERAL_MODE: False,
            }
        )
    try:
        with settings_cm:
            yield server
    finally:
        stop_prefect_server(proc)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
