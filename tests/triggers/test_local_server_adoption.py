"""A Prefect server an earlier `pitstop up` started (and left running when it was kill -9'd)
is adopted by the next `pitstop up` and stopped on exit; one that does not answer is replaced;
a pid that now names another process is never signalled.

A small HTTP server answering /api/health stands in for Prefect's (the real one takes 20 s to
start); it runs in its own session, as `pitstop up` starts the real one.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from deployments import local_server
from pitstop import procid
from tests.support.net import free_port

FAKE_SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/api/health" and sys.argv[2] == "ok" else 500)
        self.end_headers()
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


@pytest.fixture
def fake_server():
    started: list[subprocess.Popen] = []

    def start(port: int, answer: str = "ok") -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", FAKE_SERVER, str(port), answer], start_new_session=True)
        started.append(proc)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and procid.start_ticks(proc.pid) is None:
            time.sleep(0.05)
        time.sleep(0.3)  # listening
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def _left_by_earlier_up(home: Path, proc: subprocess.Popen, port: int) -> Path:
    pid_file = home / "prefect" / local_server.PID_FILE
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    local_server.write_pid_file(pid_file, proc, port)
    return pid_file


def test_healthy_server_left_by_a_killed_up_is_adopted_and_stopped_on_exit(tmp_path: Path, fake_server) -> None:
    port = free_port()
    proc = fake_server(port)
    pid_file = _left_by_earlier_up(tmp_path, proc, port)
    handle = local_server.start_local_server(tmp_path, port)
    assert handle.adopted and handle.adopted["pid"] == proc.pid and handle.owned
    assert "adopted the Prefect server" in handle.note and "stopped when this one exits" in handle.note
    handle.stop()
    assert proc.wait(10) is not None and not pid_file.exists()


def test_server_that_does_not_answer_is_stopped_and_replaced(tmp_path: Path, fake_server) -> None:
    port = free_port()
    proc = fake_server(port, answer="broken")
    pid_file = _left_by_earlier_up(tmp_path, proc, port)
    adopted, note = local_server.earlier_server(tmp_path, port)
    assert adopted is None and "stopped the Prefect server" in note and "did not answer" in note
    assert proc.wait(30) is not None and not pid_file.exists()


def test_server_on_another_port_is_stopped(tmp_path: Path, fake_server) -> None:
    old_port, new_port = free_port(), free_port()
    proc = fake_server(old_port)
    _left_by_earlier_up(tmp_path, proc, old_port)
    adopted, note = local_server.earlier_server(tmp_path, new_port)
    assert adopted is None and f"listened on port {old_port}" in note
    assert proc.wait(30) is not None


def test_a_reused_pid_is_never_signalled(tmp_path: Path, fake_server) -> None:
    port = free_port()
    bystander = fake_server(port)
    pid_file = _left_by_earlier_up(tmp_path, bystander, port)
    record = local_server.read_pid_file(pid_file)
    pid_file.write_text(__import__("json").dumps({**record, "start_ticks": record["start_ticks"] - 1}))
    adopted, note = local_server.earlier_server(tmp_path, port)  # same pid, another process now
    assert adopted is None and note is None and not pid_file.exists()
    time.sleep(0.5)
    assert bystander.poll() is None  # untouched


def test_a_server_pitstop_did_not_start_is_used_not_stopped(tmp_path: Path, fake_server) -> None:
    port = free_port()
    theirs = fake_server(port)
    handle = local_server.start_local_server(tmp_path, port)
    assert not handle.owned and "did not start" in handle.note
    handle.stop()
    time.sleep(0.3)
    assert theirs.poll() is None
