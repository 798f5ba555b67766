"""health_sweep at Llama 3's size: 2,048 demo nodes (gpu0001..gpu2048, 64 leaf switches of 32),
a handful of injected faults, the real flow against the real Prefect server. Exactly the faulty
nodes raise alarms, the dead one is left to node_alarm, the straggler is flagged, nothing else;
and the sweep finishes in CI time on a 2-core machine.

Find it with `pytest -m slow` or by its name, `-k fleet_size`.
"""

from __future__ import annotations

import time

import pytest

from pitstop.cluster.demo import DemoCluster
from pitstop.store.tables import Incident, NodeEvent
from tests.flows.conftest import rows

pytestmark = [pytest.mark.prefect, pytest.mark.slow]

FLEET = 2048
# Wall-time budget for one sweep of the whole fleet on a 2-core CI machine: the whole test takes
# ~29 s here under a load of 5 (before the demo read its state once per fan-out and reused it
# across reads: 70+ s, and a per-node read costs 3+ minutes), so a regression fails it.
SWEEP_BUDGET_S = 60.0


@pytest.fixture
def fleet(isolated_home, monkeypatch) -> DemoCluster:
    monkeypatch.setenv("PITSTOP_CLUSTER", "demo")
    monkeypatch.setenv("PITSTOP_MODE", "act")
    return DemoCluster.create(isolated_home / "demo", nodes=FLEET, seed=5)


def test_sweep_of_2048_nodes_alarms_on_exactly_the_injected_faults(prefect_server, fleet):
    from flows.health_sweep import health_sweep

    assert len(fleet.nodes()) == FLEET and len(fleet.topology()) == 64
    dead_gpus = [f.nodes[0] for f in fleet.inject_faults(2, seed=1, kinds=["gpu_fell_off_bus"])]
    [hbm] = [f.nodes[0] for f in fleet.inject_faults(1, seed=2, kinds=["hbm3_double_bit_error"])]
    [gone] = [f.nodes[0] for f in fleet.inject_faults(1, seed=3, kinds=["host_maintenance"])]
    [software] = fleet.inject_faults(1, seed=4, kinds=["software_bug"])  # the job's bug: nodes are fine
    fleet.inject_slowdown("gpu1999", 3, "pcie_x8")
    faulty = set(dead_gpus) | {hbm}
    assert len(faulty | {gone, "gpu1999"}) == 5

    started = time.monotonic()
    report = health_sweep()
    took = time.monotonic() - started

    assert report.checked == FLEET - 1 and set(report.skipped) == {gone}  # Slurm has it DOWN
    assert report.batches == (FLEET - 1 + 31) // 32
    assert {r.node for r in report.failing} == faulty, [r.summary for r in report.failing]
    assert not report.unreachable
    # one alarm per faulty node (its new Xid's), one for the straggler, none for anyone else
    alarmed = {key.split(":")[0] for key in report.alarms}
    assert alarmed == faulty | {"gpu1999"}, sorted(report.alarms)
    assert not set(software.nodes) & alarmed
    assert report.stragglers is not None and report.stragglers.flagged_gpus() == {("gpu1999", 3)}
    assert {e.node for e in rows(NodeEvent) if e.kind == "check" and e.state == "FAIL"} == faulty
    assert len([e for e in rows(NodeEvent) if e.kind == "check"]) == FLEET - 1
    assert not rows(Incident) and fleet.actions() == []  # the sweep raises alarms; node_alarm acts
    assert took < SWEEP_BUDGET_S, f"sweep of {FLEET} nodes took {took:.1f} s (budget {SWEEP_BUDGET_S:g} s)"
