"""Silent stragglers, end to end on the demo cluster against the real Prefect server: one GPU at
x8 PCIe and one throttled GPU are flagged, and nothing else; `pitstop nodes` says why; each
flagged node raises a `straggler` alarm, which the default policy only notifies about."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from pitstop.store.tables import ActionRecord, Incident, NodeEvent
from tests.flows.conftest import rows, wait_for

pytestmark = [pytest.mark.prefect]


def _alarm_events(api_url: str, since: datetime) -> list[dict]:
    """Straggler alarms raised since this test began: the server is shared by the session, and
    the 2,048-node sweep test raises one of its own."""
    from pitstop.events.deliver import PrefectEventsClient

    events = PrefectEventsClient(api_url, timeout_s=5).query(["pitstop.node.alarm"], since.isoformat())
    return [e for e in events if e["payload"].get("alarm") == "straggler"
            and e["payload"].get("node") in {"gpu03", "gpu06"}]


def _pitstop_nodes() -> str:
    env = dict(os.environ, COLUMNS="400")
    done = subprocess.run([sys.executable, "-m", "pitstop.cli.entry", "nodes"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_sweep_flags_exactly_the_x8_and_the_throttled_gpu_and_says_why(prefect_server, demo, mailbox):
    from flows.health_sweep import health_sweep
    from flows.node_alarm import node_alarm

    began = datetime.now(timezone.utc) - timedelta(seconds=5)
    demo.inject_slowdown("gpu03", 5, "pcie_x8")
    demo.inject_slowdown("gpu06", 2, "thermal_throttle")

    first = health_sweep()
    found = first.stragglers
    assert found is not None and found.flagged_gpus() == {("gpu03", 5), ("gpu06", 2)}, [f.why for f in found.flags]
    assert set(found.by_node()) == {"gpu03", "gpu06"}  # no node-level flag anywhere else
    assert found.majority == {"driver_version": "550.54.15", "cuda_version": "12.4"}
    assert found.fleet["sm_clock_ratio"].n == 64 and not first.failing  # a straggler fails no check
    signals = {(f.node, f.signal) for f in found.flags}
    assert ("gpu03", "pcie_width") in signals and ("gpu06", "clock_throttle") in signals
    assert ("gpu06", "sm_clock_ratio") in signals  # 1245 of 1980 MHz against a fleet median of ~1980
    assert sorted(first.alarms) == ["gpu03:straggler", "gpu06:straggler"], first.alarms
    assert all("delivered" in v or "sent" in v for v in first.alarms.values()), first.alarms

    # stored, and `pitstop nodes` (a separate process, reading the store) shows why
    events = [e for e in rows(NodeEvent) if e.kind == "straggler"]
    assert {(e.node, e.state) for e in events} == {("gpu03", "flagged:5/pcie_width"),
                                                   ("gpu06", "flagged:2/clock_throttle,2/power_ratio,2/sm_clock_ratio,2/temperature_c")}
    table = _pitstop_nodes()
    line03 = next(line for line in table.splitlines() if " gpu03 " in line)
    assert "GPU 5 (00000000:AB:00.0): PCIe x8 of x16" in line03
    line06 = next(line for line in table.splitlines() if " gpu06 " in line)
    assert "GPU 2 (00000000:3A:00.0): clocks held down by hw_thermal_slowdown; SM clock 1245 of 1980 MHz" in line06
    assert not any(" gpu01 " in line for line in table.splitlines())  # healthy nodes are not listed

    # the alarms reached Prefect with a cause and signature the policy understands
    alarms = wait_for(lambda: (lambda e: e if len(e) == 2 else None)(_alarm_events(prefect_server.api_url, began)), 20,
                      "two straggler alarms on the server")
    by_node = {e["payload"]["node"]: e["payload"]["details"] for e in alarms}
    assert by_node["gpu03"]["signature"] == "straggler-pcie-width" and by_node["gpu03"]["cause"] == "gpu_hardware"
    assert by_node["gpu06"]["signature"] == "straggler-clock-throttle"

    # the same stragglers at the next sweep: still shown, no second alarm
    second = health_sweep()
    assert second.stragglers.flagged_gpus() == {("gpu03", 5), ("gpu06", 2)} and second.alarms == {}
    assert len([e for e in rows(NodeEvent) if e.kind == "straggler"]) == 2

    # the default policy: notify ops, touch nothing (the demo fixture runs in act mode)
    report = node_alarm("gpu03", "straggler", by_node["gpu03"])
    [incident] = [i for i in rows(Incident) if i.id == report.incident_id]
    assert (incident.cause, incident.signature) == ("gpu_hardware", "straggler-pcie-width")
    assert [(a.kind, a.state) for a in rows(ActionRecord) if a.incident_id == incident.id] == [("notify_ops", "done")]
    assert demo.actions() == []  # no drain, no reboot
    wait_for(lambda: mailbox.messages, 20, "the ops notification")
    assert "PCIe x8 of x16" in mailbox.body(-1)

    # the GPU is reseated: the next sweep clears the flag and `pitstop nodes` stops showing it
    demo.clear_slowdown("gpu03", 5)
    third = health_sweep()
    assert third.stragglers.flagged_gpus() == {("gpu06", 2)} and third.alarms == {}
    assert "PCIe x8" not in _pitstop_nodes()
