"""A local Prefect server for one machine (`pitstop up`): SQLite under PITSTOP_HOME/prefect.

For more than one machine, run a PostgreSQL-backed `prefect server` and point PREFECT_API_URL
at it instead (README, "Triggers"); then `pitstop up` only serves the deployments.

The server runs in its own session, so a `kill -9` of `pitstop up` leaves it running. Its pid,
start time and port are in PITSTOP_HOME/prefect/server.json. The next `pitstop up` adopts it
when it is that very process, on the same port, and healthy: its state is on disk anyway, and a
restart would cost 10-30 s and the events in its queues. Adopted, it is stopped on exit like one
started fresh. One that does not answer (or listens on another port) is stopped and replaced.
A server on the port that Pitstop did not start is used and never stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from pitstop import procid
from pitstop.processes import stop_process_group

START_TIMEOUT_S = 120.0


class ServerError(RuntimeError):
    """The Prefect server could not be reached or started; says where to look."""


PID_FILE = "server.json"
STOP_GRACE_S = 20.0


@dataclass
class ServerHandle:
    api_url: str
    ui_url: str
    process: subprocess.Popen | None = None  # None: not started by this process
    log_path: Path | None = None
    adopted: dict | None = None  # the identity of a server an earlier `pitstop up` started
    pid_file: Path | None = None
    note: str | None = None  # what `pitstop up` should tell the operator about this server

    @property
    def owned(self) -> bool:
        return self.process is not None or self.adopted is not None

    def stop(self) -> None:
        if self.process is not None:
            stop_process_group(self.process, grace_s=STOP_GRACE_S)  # its own session: server and workers
        elif self.adopted is not None:
            stop_adopted(self.adopted)
        if self.owned and self.pid_file is not None:
            with contextlib.suppress(OSError):
                self.pid_file.unlink()


def stop_adopted(identity: dict, grace_s: float = STOP_GRACE_S) -> None:
    """TERM, grace, KILL the process group of a server this process did not start (it was
    started with start_new_session, so its group id is its pid). Only if it is still that
    process: a pid reused by something else is never signalled."""
    pid = identity["pid"]
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        if procid.still_running(identity) is not True:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and procid.still_running(identity) is True:
            time.sleep(0.2)


def read_pid_file(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("pid"), int) else None


def write_pid_file(path: Path, proc: subprocess.Popen, port: int) -> None:
    record = {**procid.identity(proc.pid), "port": port, "started_by_pid": os.getpid()}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def earlier_server(pitstop_home: Path, port: int) -> tuple[ServerHandle | None, str | None]:
    """A server an earlier (killed) `pitstop up` left running: adopted (returned) when it is
    healthy on this port, else stopped. The text says what happened, for the operator."""
    pid_file = pitstop_home / "prefect" / PID_FILE
    record = read_pid_file(pid_file)
    if record is None:
        return None, None
    alive = procid.still_running(record)
    if alive is not True:  # gone (or its pid is someone else's now): nothing to adopt
        with contextlib.suppress(OSError):
            pid_file.unlink()
        return None, None
    api_url = f"http://127.0.0.1:{port}/api"
    if record.get("port") == port and healthy(api_url):
        note = (f"adopted the Prefect server (pid {record['pid']}) an earlier `pitstop up` left running; "
                "it is stopped when this one exits")
        return ServerHandle(api_url, ui_url_for(api_url), adopted=record, pid_file=pid_file, note=note,
                            log_path=pitstop_home / "log" / "prefect-server.log"), note
    stop_adopted(record)
    with contextlib.suppress(OSError):
        pid_file.unlink()
    return None, (f"stopped the Prefect server (pid {record['pid']}) an earlier `pitstop up` left running "
                  f"(it {'listened on port ' + str(record.get('port')) if record.get('port') != port else 'did not answer'}); "
                  "starting a fresh one")


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
    adopted, note = earlier_server(pitstop_home, port)
    if adopted is not None:
        return adopted
    if healthy(api_url):  # someone else's server on this port: use it, never stop it
        return ServerHandle(api_url, ui_url_for(api_url), note=f"a Prefect server Pitstop did not start "
                            f"answers on port {port}: using it, and leaving it running on exit")
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
    pid_file = prefect_home / PID_FILE
    write_pid_file(pid_file, proc, port)
    handle = ServerHandle(api_url, ui_url_for(api_url), proc, log_path, pid_file=pid_file, note=note)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            handle.stop()  # removes the pid file
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
