"""Stopping a child that runs in its own session (Prefect servers, `pitstop up`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def stop_process_group(proc: subprocess.Popen, grace_s: float = 20.0) -> None:
    """SIGTERM the child's process group, wait `grace_s`, then SIGKILL it. Safe to call twice.

    The child must have been started with `start_new_session=True`, so its group is its own and
    holds only it and its workers.
    """
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
