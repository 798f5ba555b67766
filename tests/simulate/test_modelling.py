"""Pins of what the simulation must do the way Pitstop really does it, one interruption at a time.

Each test plays one fault through the public `Simulation.run` (one crafted arrival, one day) and
reads the books: who the job waited for, whether the node came back.
"""

from __future__ import annotations

import pytest

from pitstop.policy.model import load_policy
from pitstop.simulate.engine import Simulation
from pitstop.simulate.evidence import verdicts
from pitstop.simulate.params import Need, SimParams
from pitstop.simulate.strategies import strategies

FAULT_AT = 100.0  # minutes: the job is training by then (6 min restart)


def _one_fault(params: SimParams, classify, category: str, need: Need, *, diag_miss: float,
               fault_at: float = FAULT_AT) -> Simulation:
    """A one-day act-mode run with a single fault of `category` on the job's first node."""
    short = params.model_copy(update={
        "cluster": params.cluster.model_copy(update={"days": 1}),
        "node_times": params.node_times.model_copy(update={"diag_miss_below_level3": diag_miss}),
    })
    index = next(i for i, c in enumerate(short.categories) if c.name == category)
    sim = Simulation(short, strategies(["act"])[0], load_policy(), verdicts(short.categories, classify), seed=0,
                     arrivals=[(fault_at, index, 0.0, need)])
    sim.result = sim.run()
    return sim


def test_an_rma_approval_after_the_requeue_does_not_hold_the_job(params, classify) -> None:
    """Xid 79 on a GPU that must be replaced: drain, requeue excluding it, reboot, check fails,
    deep check fails, RMA ticket - which asks ops (approval_required: rma_ticket). The job was
    requeued at the second step (tasks/remediate.py runs the plan in order), so it never waits
    for that answer: the interruption did not need a person, the node's return did."""
    sim = _one_fault(params, classify, "faulty_gpu", Need.REPLACE, diag_miss=0.0)
    r = sim.result
    assert r.interruptions == 1 and r.approvals == 1
    assert r.needed_human == 0 and r.human_restarts == 0
    assert r.lost_gpu_hours["waiting_for_human"] == 0.0
    assert "gpu0000" in sim.pool.out  # kept out for the vendor, not put back in the job


def test_an_early_software_bug_needs_a_person_to_restart_the_job(params, classify) -> None:
    """A crash 30 min after the run began (under the default policy's ran_at_least_minutes: 60)
    is left to the user: the counterpart of the test above, so `needed_human` is not simply
    never counted."""
    r = _one_fault(params, classify, "software_bug", Need.NONE, diag_miss=0.0, fault_at=30.0).result
    assert r.needed_human == 1 and r.human_restarts == 1
    assert r.needed_human_by_category == {"software_bug": 1}
    assert r.waiting_for_human_by_cause["software_bug"] == pytest.approx(r.lost_gpu_hours["waiting_for_human"])


def test_a_software_bug_after_an_hour_of_training_is_restarted_once(params, classify) -> None:
    """The same crash after 100 min of running: the default policy's run-time rule requeues it
    (the simulation passes the run's start as Slurm's StartTime), nobody is woken."""
    r = _one_fault(params, classify, "software_bug", Need.NONE, diag_miss=0.0, fault_at=FAULT_AT).result
    assert r.interruptions == 1 and r.needed_human == 0 and r.human_restarts == 0
    assert r.lost_gpu_hours["waiting_for_human"] == 0.0


def test_the_node_check_fails_a_dead_cable_whatever_the_dcgm_level(params, classify) -> None:
    """The fabric ladder checks a link fault with diag level 1. Pitstop's diag step runs the node
    check too (tasks/act.py _diag), whose InfiniBand check fails a port that is not ACTIVE/LinkUp
    (pitstop/node/infiniband.py port_findings): a cable that does not come back is never
    resumed, even when DCGM's shallow level would miss every broken part."""
    sim = _one_fault(params, classify, "network_switch_cable", Need.REPLACE, diag_miss=1.0)
    assert "gpu0000" in sim.pool.out
    assert sim.result.repeat_failures == 0


def test_a_shallow_check_still_misses_what_the_node_check_cannot_see(params, classify) -> None:
    """A dead NIC can vanish from sysfs (one missing HCA of eight is no ib finding): there the
    configured DCGM miss still applies, and the node is resumed with its fault."""
    sim = _one_fault(params, classify, "nic", Need.REPLACE, diag_miss=1.0)
    assert "gpu0000" not in sim.pool.out and sim.pool.need("gpu0000") is Need.REPLACE


def test_interruptions_are_fresh_faults_plus_repeats_and_exclude_the_job_chain(default_runs) -> None:
    for c in default_runs.values():
        for s in c.strategies:
            assert s.interruptions == s.fresh_interruptions + s.repeat_failures
            assert sum(s.needed_human_by_category.values()) == s.needed_human
            assert sum(s.waiting_for_human_by_cause.values()) == pytest.approx(s.lost_gpu_hours["waiting_for_human"])
        act = c.by_name("act")
        # one 24 h link a day: the restarts between links are planned, booked apart
        assert 0 < act.planned_restarts <= c.days
