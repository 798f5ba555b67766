"""The comparison as rich tables: one row per strategy, then the GPU-hours each cause cost."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from pitstop.simulate.results import LOSS_KINDS, LOSS_LABELS, Comparison

TOP_CAUSES = 8  # the cause table shows the costliest ones; --json has them all


def _k(gpu_hours: float) -> str:
    return f"{gpu_hours / 1000:,.0f}k"


def summary_table(c: Comparison) -> Table:
    t = Table(title=f"{c.days:g} days, {c.job_nodes:,} nodes x {c.gpus // c.job_nodes} GPUs "
                    f"({c.spare_nodes} spare nodes), seed {c.seed}, policy {c.policy}")
    for header in ("strategy", "ETTR", "inter-\nrupts", "re-\npeats", "human\nneeded",
                   "by\nhand", "appro-\nvals", "nodes out\nmean/max"):
        t.add_column(header, justify="left" if header == "strategy" else "right", no_wrap=True)
    for s in c.strategies:
        t.add_row(s.label, f"{s.ettr:.3f}", str(s.interruptions), str(s.repeat_failures), str(s.needed_human),
                  str(s.human_restarts), str(s.approvals), f"{s.nodes_out_mean:.1f}/{s.nodes_out_max}")
    t.caption = ("interrupts = fresh faults + repeats (a bad node the job ran on again); the job chain's "
                 "planned restarts are not interrupts. human needed: the job's restart waited for a person "
                 "(by hand: restarted by one); approvals (RMA, reboot) after the requeue keep a node out, not the job.")
    return t


def loss_table(c: Comparison) -> Table:
    t = Table(title="GPU-hours lost, by kind")
    t.add_column("lost to", no_wrap=True)
    for s in c.strategies:
        t.add_column(s.label, justify="right")
    for kind in LOSS_KINDS:
        t.add_row(LOSS_LABELS[kind], *(_k(s.lost_gpu_hours.get(kind, 0.0)) for s in c.strategies))
    t.add_row("total", *(_k(sum(s.lost_gpu_hours.values())) for s in c.strategies), style="bold")
    return t


def cause_table(c: Comparison) -> Table:
    totals: dict[str, float] = {}
    for s in c.strategies:
        for cause, v in s.lost_gpu_hours_by_cause.items():
            totals[cause] = totals.get(cause, 0.0) + v
    causes = sorted(totals, key=lambda k: -totals[k])[:TOP_CAUSES]
    t = Table(title="GPU-hours lost per cause (the fault that stopped the job; top "
                    f"{min(TOP_CAUSES, len(totals))})")
    t.add_column("cause", no_wrap=True)
    for s in c.strategies:
        t.add_column(s.label, justify="right")
    for cause in causes:
        t.add_row(cause, *(_k(s.lost_gpu_hours_by_cause.get(cause, 0.0)) for s in c.strategies))
    return t


def print_tables(c: Comparison, console: Console | None = None) -> None:
    console = console or Console()
    console.print(summary_table(c))
    console.print(loss_table(c))
    console.print(cause_table(c))
    console.print(f"{c.events:,} simulated events in {c.wall_seconds:.1f} s "
                  f"({c.events / max(c.wall_seconds, 1e-9):,.0f} events/s); "
                  f"{c.expected_interruptions:.0f} interruptions expected from the configured rates")
