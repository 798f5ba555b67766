"""Goodput of one Llama 3-sized training run under four strategies, and how fast the simulation is.

    .venv/bin/python bench/goodput.py [--seed 0] [--policy FILE] [--params FILE] [--days 54] [--nodes 2048]

Runs `pitstop simulate`'s comparison (no automation, Pitstop observe, Pitstop act, a policy that
never excludes the failed node; the same faults for each) through the real classifier, `decide`
and escalation path, prints the tables, then the wall time and the simulated events per second
against the 60 s budget for 54 days at 2,048 nodes. Exit 1 when over budget.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pitstop.cli.cmd_simulate import run_simulation  # noqa: E402
from pitstop.simulate.table import print_tables  # noqa: E402

BUDGET_S = 60.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--policy", type=Path, default=None)
    ap.add_argument("--params", type=Path, default=None)
    ap.add_argument("--days", type=float, default=None)
    ap.add_argument("--nodes", type=int, default=None)
    args = ap.parse_args()
    started = time.perf_counter()
    result = run_simulation(args.params, args.policy, seed=args.seed, days=args.days, nodes=args.nodes)
    wall = time.perf_counter() - started  # classifier start-up included
    print_tables(result)
    events = result.events
    print(f"wall time {wall:.2f} s for {len(result.strategies)} strategies x {result.days:g} days x "
          f"{result.job_nodes:,} nodes; {events:,} simulated events ({events / wall:,.0f} events/s), "
          f"{sum(s.decisions for s in result.strategies):,} decide() calls; budget {BUDGET_S:.0f} s: "
          f"{'ok' if wall < BUDGET_S else 'OVER'}")
    return 0 if wall < BUDGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
