"""`pitstop simulate`: the goodput simulation, composed with the real classifier.

The simulation core (pitstop/simulate) never imports `classifiers`; this command hands it a
`classify` callable backed by `classifiers.classify_text`, cached per distinct log sample, so the
per-event path only looks verdicts up.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional

import typer

HELP = "\n\n".join([
    "Simulate one large synchronous training job (default: Llama 3 405B's 54 days on 2,048 nodes x 8 GPUs, "
    "Table 5's 419 interruptions as rates) under four strategies on the same faults: no automation, "
    "Pitstop observe, Pitstop act, and act with a policy that never excludes the failed node.",
    "Every interruption goes through the real classifier, `decide` and the escalation ladder with the "
    "policy you run (--policy, else the configured one, else the built-in default). Prints ETTR, GPU-hours "
    "lost per cause, interruptions a human had to act on, nodes out of the pool and repeat failures.",
    "Exit 0, or 2 for bad parameters or policy.",
])


def make_classifier():
    """LogSample -> Verdict through classifiers.classify_text, cached per distinct sample."""
    from classifiers import classify_text
    from pitstop.models import SchedulerFacts

    @functools.lru_cache(maxsize=None)
    def classify(sample):
        facts = SchedulerFacts(state=sample.job_state, exit_code=sample.exit_code)
        return classify_text(sample.log, facts, kernel_text=sample.kernel)

    return classify


def run_simulation(params_file: Path | None, policy_file: Path | None, *, seed: int | None = None,
                   days: float | None = None, nodes: int | None = None, spares: int | None = None,
                   strategy: list[str] | None = None, progress=None):
    """Load, override, compare: what the command and bench/goodput.py both run."""
    from pitstop.policy.model import load_policy
    from pitstop.simulate import compare, load_params
    from pitstop.simulate.strategies import strategies

    params = load_params(params_file)
    cluster = params.cluster.model_copy(update={k: v for k, v in
                                                {"days": days, "job_nodes": nodes, "spare_nodes": spares}.items() if v is not None})
    params = params.model_copy(update={"cluster": cluster})
    if policy_file is None:
        from pitstop.config import load_settings

        policy_file = load_settings().policy.file
    policy = load_policy(policy_file)
    return compare(params, policy, make_classifier(), seed=seed, strategies=strategies(strategy),
                   policy_source=str(policy_file) if policy_file else "(built-in default)", progress=progress)


def simulate(
    params_file: Optional[Path] = typer.Option(None, "--params", help="parameters YAML (default: the Llama 3 one shipped)"),
    policy_file: Optional[Path] = typer.Option(None, "--policy", help="policy YAML (default: the configured one)"),
    seed: Optional[int] = typer.Option(None, "--seed", help="random seed (default: the parameters' seed)"),
    days: Optional[float] = typer.Option(None, "--days", help="simulated days"),
    nodes: Optional[int] = typer.Option(None, "--nodes", help="nodes the job runs on"),
    spares: Optional[int] = typer.Option(None, "--spares", help="spare nodes beside the job"),
    strategy: list[str] = typer.Option([], "--strategy", help="only these: no_automation, observe, act, bad_policy (repeatable)"),
    as_json: bool = typer.Option(False, "--json", help="print the comparison as one JSON object"),
    png: Optional[Path] = typer.Option(None, "--png", help="write the figure (ETTR, GPU-hours lost, nodes out) here"),
    no_progress: bool = typer.Option(False, "--no-progress", help="no progress bar"),
) -> None:
    from contextlib import nullcontext

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from pitstop.config import ConfigError
    from pitstop.policy.model import PolicyError
    from pitstop.simulate.strategies import strategies as pick

    err = Console(stderr=True)
    try:
        chosen = pick(strategy)
    except ValueError as exc:
        err.print(f"pitstop simulate: {exc}")
        raise typer.Exit(2) from None
    bar = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=err,
                   transient=True, disable=no_progress)
    with bar if not no_progress else nullcontext():
        tasks = [bar.add_task(s.label, total=1.0) for s in chosen]
        try:
            result = run_simulation(params_file, policy_file, seed=seed, days=days, nodes=nodes, spares=spares,
                                    strategy=[s.name for s in chosen],
                                    progress=lambda i, f: bar.update(tasks[i], completed=f))
        except (ValueError, PolicyError, ConfigError) as exc:
            err.print(f"pitstop simulate: {exc}")
            raise typer.Exit(2) from None
    if as_json:
        typer.echo(result.model_dump_json())
    else:
        from pitstop.simulate.table import print_tables

        print_tables(result)
    if png is not None:
        from pitstop.simulate.figure import write_png

        err.print(f"wrote {write_png(result, png)}")


def register(app: typer.Typer) -> None:
    app.command("simulate", help=HELP)(simulate)
