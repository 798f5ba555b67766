"""Run every strategy on the same faults and put the results side by side."""

from __future__ import annotations

import time
from collections.abc import Callable

from pitstop.policy.model import Policy
from pitstop.simulate.engine import Simulation, fault_arrivals
from pitstop.simulate.evidence import Classify, verdicts
from pitstop.simulate.params import SimParams
from pitstop.simulate.results import Comparison
from pitstop.simulate.strategies import Strategy, strategies as all_strategies

# (strategy index, fraction of its run done) -> None
Progress = Callable[[int, float], None]


def compare(params: SimParams, policy: Policy, classify: Classify, *, seed: int | None = None,
            strategies: list[Strategy] | None = None, policy_source: str = "(built-in default)",
            progress: Progress | None = None) -> Comparison:
    """One seeded run per strategy: the same fault arrivals for all of them."""
    chosen = strategies or all_strategies()
    seed = params.seed if seed is None else seed
    started = time.perf_counter()
    found = verdicts(params.categories, classify)
    arrivals = fault_arrivals(params, seed)
    results = []
    for i, strategy in enumerate(chosen):
        report = None if progress is None else (lambda f, i=i: progress(i, f))
        sim = Simulation(params, strategy, policy, found, seed, arrivals=arrivals, on_progress=report)
        results.append(sim.run())
    return Comparison(
        source=params.source,
        policy=policy_source,
        seed=seed,
        days=params.cluster.days,
        job_nodes=params.cluster.job_nodes,
        gpus=params.cluster.job_nodes * params.cluster.gpus_per_node,
        spare_nodes=params.cluster.spare_nodes,
        expected_interruptions=sum(params.expected_count(c) for c in params.categories),
        verdicts={name: f"{v.cause.value}/{v.signature}" for name, v in found.items()},
        strategies=results,
        wall_seconds=time.perf_counter() - started,
    )
