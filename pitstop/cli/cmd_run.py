"""`pitstop run` (help only: the real entry is the fast path) and `pitstop runs [show ID]`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

RUN_HELP = """Run CMD under Pitstop: logs in $PITSTOP_HOME/runs/<id>/, cause classified, people notified.

Usage: pitstop run [--notify URL]... [--attach GLOB]... [--notify-success] [--name NAME] [--quiet] -- CMD [ARGS...]

The exit code is CMD's (128+N if a signal N killed it; 127 not found; 126 not executable).
SIGINT/SIGTERM/SIGHUP/SIGQUIT/SIGUSR1/SIGUSR2 are forwarded to CMD's process group.
"""


def register(app: typer.Typer) -> None:
    @app.command(
        "run",
        help=RUN_HELP,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=True,
    )
    def run_cmd(ctx: typer.Context) -> None:
        from pitstop.wrapper.supervise import main as run_main

        raise typer.Exit(run_main(list(ctx.args)))

    runs = typer.Typer(help="Runs wrapped by `pitstop run`: history and details.", invoke_without_command=True)

    @runs.callback()
    def runs_list(
        ctx: typer.Context,
        limit: int = typer.Option(20, "--limit", "-n", min=1, help="how many runs, newest first"),
        as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
    ) -> None:
        if ctx.invoked_subcommand is not None:
            return
        from pitstop.cli.runs_view import list_runs

        raise typer.Exit(list_runs(limit, as_json))

    @runs.command("show")
    def runs_show(
        run_id: str = typer.Argument(..., help="run id, or a unique prefix of one"),
        as_json: bool = typer.Option(False, "--json", help="print JSON instead of text"),
    ) -> None:
        """Show one run: command, exit code, cause, evidence, log paths, notification."""
        from pitstop.cli.runs_view import show_run

        raise typer.Exit(show_run(run_id, as_json))

    app.add_typer(runs, name="runs")
