"""Wrapper tests run the real `pitstop` console script as a subprocess, and a real SMTP receiver
(aiosmtpd) on 127.0.0.1. Nothing about the process boundary or the mail is faked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.net import Mailbox, silent_listener, smtp_receiver

VENV_BIN = Path(sys.executable).parent
PITSTOP = str(VENV_BIN / "pitstop")
PY = sys.executable


@pytest.fixture
def smtp() -> Mailbox:
    with smtp_receiver() as box:
        yield box


@pytest.fixture
def blackhole_smtp():
    """A TCP server that accepts and never says a word: apprise would wait on it forever."""
    with silent_listener() as port:
        yield port


@dataclass
class Finished:
    returncode: int
    stdout: bytes
    stderr: bytes
    home: Path
    run_dir: Path | None

    def json(self, name: str) -> dict:
        return json.loads((self.run_dir / name).read_text())

    def text(self, name: str) -> str:
        return (self.run_dir / name).read_text(errors="replace")


def latest_run_dir(home: Path) -> Path:
    runs = sorted((home / "runs").iterdir())
    assert runs, f"no run directory under {home / 'runs'}"
    return runs[-1]


def wait_for_run_dir(home: Path, timeout: float = 10.0) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (home / "runs").is_dir() and any((home / "runs").iterdir()):
            return latest_run_dir(home)
        time.sleep(0.02)
    raise AssertionError("the wrapper made no run directory")


def wait_for_text(path: Path, needle: bytes, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if needle in path.read_bytes():
                return
        except FileNotFoundError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"{needle!r} never appeared in {path}")


@pytest.fixture
def run_pitstop(isolated_home: Path):
    """Run `pitstop run [opts] -- cmd...` to completion; returns what it did."""

    def _run(cmd: list[str], opts: list[str] = (), env: dict | None = None, timeout: float = 120,
             cwd: Path | None = None) -> Finished:
        full_env = {**os.environ, "PITSTOP_NOTIFY__TIMEOUT_S": "5", **(env or {})}
        runs = Path(full_env["PITSTOP_HOME"]) / "runs"
        before = set(runs.iterdir()) if runs.is_dir() else set()
        proc = subprocess.run(
            [PITSTOP, "run", *opts, "--", *cmd],
            capture_output=True, env=full_env, timeout=timeout, cwd=cwd,
        )
        new = sorted(set(runs.iterdir()) - before) if runs.is_dir() else []
        assert len(new) <= 1, f"one run, one directory: {new}"
        return Finished(proc.returncode, proc.stdout, proc.stderr, isolated_home, new[0] if new else None)

    return _run
