"""`pitstop nodes|incidents|breaker|mode` run as real subprocesses against a real SQLite store."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from pitstop.config import load_settings
from pitstop.models import Cause, Verdict
from pitstop.store import Store
from pitstop.store import records as r


def pitstop(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITSTOP_")}
    env["PITSTOP_HOME"] = str(home)
    env["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-m", "pitstop.cli.entry", *args], env=env, capture_output=True,
                          text=True, timeout=60)


def seed(home: Path) -> None:
    store = Store.from_settings(load_settings(home=home))
    v = Verdict(cause=Cause.GPU_HARDWARE, signature="xid-79", confidence=0.9)
    inc, _ = r.create_job_incident(store, cluster="dev", job_id="42", end_time=datetime.now(timezone.utc),
                                   verdict=v, nodes=["gpu-01"])
    r.plan_actions(store, inc.id, [r.ActionIntent(seq=0, kind="drain", target="gpu-01", state="would_do")])
    r.record_node_state(store, "dev", "gpu-01", state="DRAIN", reason=f"pitstop: gpu_hardware xid-79 incident={inc.id}",
                        owner="pitstop", incident_id=inc.id)
    r.set_node_ladder(store, "dev", "gpu-01", "reset_gpu", 1)
    r.set_node_lemon(store, "dev", "gpu-01", ["5 distinct failed jobs"])
    r.record_node_state(store, "dev", "gpu-02", state="DRAIN", reason="bad PSU - bob", owner="foreign")
    r.open_breaker(store, "partition:gpu", "storm guard: 3 of 4 nodes")
    store.dispose()


def test_records_commands(isolated_home: Path) -> None:
    seed(isolated_home)
    out = pitstop(isolated_home, "nodes")
    assert out.returncode == 0, out.stderr
    assert "gpu-01" in out.stdout and "reset_gpu 2" in out.stdout and "LEMON" in out.stdout
    assert "someone else" in out.stdout
    out = pitstop(isolated_home, "incidents")
    assert out.returncode == 0 and "xid-79" in out.stdout and "drain gpu-01: would_do" in out.stdout
    out = pitstop(isolated_home, "breaker", "status")
    assert "OPEN" in out.stdout and "partition:gpu" in out.stdout
    out = pitstop(isolated_home, "breaker", "reset", "--scope", "partition:nope")
    assert out.returncode == 1 and "not open" in out.stderr
    out = pitstop(isolated_home, "breaker", "reset", "--scope", "partition:gpu", "-m", "PDU fixed")
    assert out.returncode == 0 and "closed" in out.stdout
    assert "closed" in pitstop(isolated_home, "breaker", "status").stdout


def test_mode_command(isolated_home: Path) -> None:
    assert "mode: observe (from settings)" in pitstop(isolated_home, "mode").stdout
    assert pitstop(isolated_home, "mode", "yolo").returncode == 2
    assert pitstop(isolated_home, "mode", "canary").returncode == 2  # needs a canary list
    out = pitstop(isolated_home, "mode", "canary", "-p", "canary")
    assert out.returncode == 0, out.stderr
    assert "mode: canary on canary (set by" in pitstop(isolated_home, "mode").stdout
    assert pitstop(isolated_home, "mode", "act").returncode == 0
    store = Store.from_settings(load_settings(home=isolated_home))
    assert r.get_mode(store).mode.value == "act"  # what the flows read at each decision
    store.dispose()


def test_empty_store_and_broken_database(isolated_home: Path) -> None:
    out = pitstop(isolated_home, "incidents")
    assert out.returncode == 0 and "No incidents recorded" in out.stdout
    assert "No nodes recorded" in pitstop(isolated_home, "nodes").stdout
    bad = isolated_home / "pitstop.db"
    bad.unlink()
    for suffix in ("-wal", "-shm"):
        Path(str(bad) + suffix).unlink(missing_ok=True)
    bad.write_bytes(b"this is not a database" * 100)
    out = pitstop(isolated_home, "nodes")
    assert out.returncode == 2 and "cannot open the database" in out.stderr and "Traceback" not in out.stderr
