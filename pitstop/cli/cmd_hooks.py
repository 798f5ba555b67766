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

    @spool_app.command("list", help="Show spooled events (pending, refused, delivered counts), "
                                     "also in fallback spools a hook used when PITSTOP_HOME was unwritable.")
    def spool_list(
        as_json: bool = typer.Option(False, "--json", help="one JSON object per pending event"),
    ) -> None:
        from pitstop.config import load_settings
        from pitstop.events.spool import spools_to_deliver
        from pitstop.ids import escape_controls

        spools = spools_to_deliver(load_settings().spool_dir)
        for spool in spools:
            for item in spool.iter_pending():
                if as_json:
                    typer.echo(item.event.model_dump_json())
                    continue
                p = item.event.payload
                about = f"node {p.get('node')}" if "node" in p else f"job {p.get('job_id')}"
                typer.echo(escape_controls(f"{item.event.occurred.isoformat()}  {item.event.event:20}  "
                                           f"{about}  {item.event.id}"))
        if as_json:
            return
        for index, spool in enumerate(spools):
            counts = spool.counts()
            label = "" if index == 0 else "FALLBACK (PITSTOP_HOME was unwritable) "
            typer.echo(f"{label}{counts['pending']} pending, {counts['bad']} refused (spool/bad), "
                       f"{counts['sent']} delivered kept  [{spool.root}]")
            for stray in spool.strays():
                kind = "directory" if stray.is_dir() else "dangling symlink" if stray.is_symlink() else "not an event file"
                typer.echo(f"  not counted: {escape_controls(str(stray))} ({kind}; remove it or move it aside)")

    @spool_app.command("flush", help="Deliver spooled events to the Prefect API now "
                                      "(PITSTOP_HOME's spool and any fallback spool).")
    def spool_flush(
        timeout_s: float = typer.Option(5.0, help="network timeout per request"),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        from pitstop.config import load_settings
        from pitstop.events.deliver import FlushReport, PrefectEventsClient, flush, resolve_api_url
        from pitstop.events.spool import SpoolError, spools_to_deliver

        settings = load_settings()
        url = resolve_api_url(settings.triggers.prefect_api_url)
        client = PrefectEventsClient(url, timeout_s) if url else None
        total = FlushReport()
        for spool in spools_to_deliver(settings.spool_dir):
            try:
                report = flush(spool, client, keep_sent=settings.triggers.spool_keep_sent, wait_for_lock=True)
            except SpoolError as exc:  # e.g. PITSTOP_HOME read-only: still deliver the fallback spools
                total.errors.append(str(exc))
                continue
            total.delivered += report.delivered
            total.pending += report.pending
            total.quarantined += report.quarantined
            total.errors += report.errors
        if as_json:
            typer.echo(json.dumps({"delivered": total.delivered, "pending": total.pending,
                                   "refused": total.quarantined, "errors": total.errors}))
        else:
            typer.echo(total.summary)
        raise typer.Exit(0 if total.pending == 0 else 1)
