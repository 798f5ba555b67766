"""`pitstop reconcile`: one reconciliation pass, for cron (`pitstop up` runs the same in a loop).

Exit 0: nothing was missing, or every missing run was started; 1: something was given up on or
could not be started (the lines say what); 2: Prefect or the store could not be read.
"""

from __future__ import annotations

import json

import typer


def register(app: typer.Typer) -> None:
    @app.command(help="Start the flow runs Prefect's automation dropped and resume remediations "
                      "whose process died (one pass; `pitstop up` runs it every "
                      "triggers.reconcile_interval_s). Exit 0 ok, 1 something given up on, 2 cannot read.")
    def reconcile(
        dry_run: bool = typer.Option(False, "--dry-run", help="say what would be started, start nothing"),
        lookback_s: float = typer.Option(None, "--lookback-s", help="events this old are checked "
                                         "(default triggers.reconcile_lookback_s)"),
        as_json: bool = typer.Option(False, "--json", help="the plan and what was done, as JSON"),
    ) -> None:
        import os

        from pitstop.config import load_settings
        from pitstop.events.deliver import resolve_api_url

        settings = load_settings()
        api_url = resolve_api_url(settings.triggers.prefect_api_url) or (
            f"http://127.0.0.1:{settings.triggers.server_port}/api")  # `pitstop up`'s local server
        os.environ["PREFECT_API_URL"] = api_url  # before prefect is imported

        from deployments.local_server import healthy
        from deployments.reconcile import ReconcileError, run_once

        if not healthy(api_url):
            typer.echo(f"pitstop reconcile: Prefect API {api_url} does not answer /health; start it "
                       "(`pitstop up`) or set PREFECT_API_URL", err=True)
            raise typer.Exit(2)
        try:
            report = run_once(settings, dry_run=dry_run, lookback_s=lookback_s)
        except ReconcileError as exc:
            typer.echo(f"pitstop reconcile: {exc}", err=True)
            raise typer.Exit(2) from None
        if as_json:
            typer.echo(json.dumps({**report.model_dump(mode="json"), "summary": report.summary}, indent=2))
        else:
            typer.echo("\n".join(report.lines))
        raise typer.Exit(1 if report.plan.give_up or report.errors else 0)
