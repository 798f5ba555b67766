"""The incident lock tells reconciliation whether a process still remediates an incident:
held while the flow's `incident_lock` is, free once that process is gone (even by kill -9)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from pitstop.reconcile.liveness import incident_lock_path, lock_state, this_host

REPO = Path(__file__).resolve().parents[2]
HOLDER = """
import sys, time
from pathlib import Path
from types import SimpleNamespace
from tasks.journal import incident_lock
ctx = SimpleNamespace(settings=SimpleNamespace(home=Path(sys.argv[1])), flow_run_id="run-1")
with incident_lock(ctx, 7):
    print("locked", flush=True)
    time.sleep(120)
"""


def test_lock_taken_by_the_flows_lock_is_seen_held_then_free_after_kill_9(tmp_path: Path) -> None:
    path = incident_lock_path(tmp_path, 7)
    assert lock_state(path) == "unknown"  # never taken on this host
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"locked"
        assert lock_state(path) == "held"
        assert lock_state(path) == "held"  # the probe itself takes nothing away
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
    assert lock_state(path) == "free"


def test_a_lock_file_written_on_another_host_says_nothing(tmp_path: Path) -> None:
    path = incident_lock_path(tmp_path, 9)
    path.parent.mkdir(parents=True)
    path.write_text("some-other-node pid=4 flow_run=x\n")
    assert lock_state(path) == "unknown"
    path.write_text(f"{this_host()} pid=4 flow_run=x\n")
    assert lock_state(path) == "free"
