"""`pitstop epilog`, `pitstop prolog` (Slurm hooks) and `pitstop spool list|flush`.

The hooks normally bypass typer (pitstop/cli/entry.py); these commands exist for `--help` and
for running them by hand.
"""

from __future__ import annotations

import json

import typer


def register(app: typer.Typer) -> None:
    @app.command(help="Slurm EpilogSlurmctld/Epilog hook: emit pitstop.job.ended. Always exits 0.")
    def epilog() -> None:
        from pitstop.events.hooks import run_epilog

        raise typer.Exit(run_epilog())

    @app.command(help="Slurm Prolog hook: fast node checks; exit 1 on FAIL (Slurm drains the node).")
    def prolog() -> None:
        from pitstop.events.hooks import run_prolog

        raise typer.Exit(run_prolog())

    spool_app = typer.Typer(help="Events waiting for delivery to Prefect.", no_args_is_help=True)
    app.add_typer(spool_app, name="spool")

    @spool_app.command("list", help="Show spooled events (pending, refused, delivered counts).")
    def spool_list(
        as_json: bool = typer.Option(False, "--json", help="one JSON object per pending event"),
    ) -> None:
        from pitstop.config import load_settings
        from pitstop.events.spool import Spool

        spool = Spool(load_settings().spool_dir)
        for item in spool.iter_pending():
            if as_json:
                typer.echo(item.event.model_dump_json())
            else:
                p = item.event.payload
                about = f"node {p.get('node')}" if "node" in p else f"job {p.get('job_id')}"
                typer.echo(f"{item.event.occurred.isoformat()}  {item.event.event:20}  "
                           f"{about}  {item.event.id}")
        if not as_json:
            counts = spool.counts()
            typer.echo(f"{counts['pending']} pending, {counts['bad']} refused (spool/bad), "
                       f"{counts['sent']} delivered kept  [{spool.root}]")

    @spool_app.command("flush", help="Deliver spooled events to the Prefect API now.")
    def spool_flush(
        timeout_s: float = typer.Option(5.0, help="network timeout per request"),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        from pitstop.config import load_settings
        from pitstop.events.deliver import PrefectEventsClient, flush, resolve_api_url
        from pitstop.events.spool import Spool

        settings = load_settings()
        url = resolve_api_url(settings.triggers.prefect_api_url)
        client = PrefectEventsClient(url, timeout_s) if url else None
        report = flush(Spool(settings.spool_dir), client,
                       keep_sent=settings.triggers.spool_keep_sent, wait_for_lock=True)
        if as_json:
            typer.echo(json.dumps({"delivered": report.delivered, "pending": report.pending,
                                   "refused": report.quarantined, "errors": report.errors}))
        else:
            typer.echo(report.summary)
        raise typer.Exit(0 if report.pending == 0 else 1)
