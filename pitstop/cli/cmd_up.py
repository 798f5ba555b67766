"""`pitstop up`: a Prefect server (local SQLite one unless configured), the deployments and their
automations served, the spool deliverer and the reconciliation loop running. Blocks until
Ctrl-C / SIGTERM."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command(help="Start (or use) a Prefect server, serve Pitstop's deployments, print the UI.")
    def up(
        port: int = typer.Option(None, help="port of the local server (default triggers.server_port)"),
    ) -> None:
        import os
        import signal
        import threading

        from pitstop.config import load_settings
        from pitstop.events.deliver import PrefectEventsClient, deliver_forever, resolve_api_url
        from pitstop.events.spool import spools_to_deliver

        from deployments.local_server import ServerError, ensure_server, local_server_environment

        settings = load_settings()
        configured = resolve_api_url(settings.triggers.prefect_api_url)
        try:
            server = ensure_server(configured, settings.home, port or settings.triggers.server_port)
        except ServerError as exc:
            typer.echo(f"pitstop up: {exc}", err=True)
            raise typer.Exit(2) from None
        if not configured:
            os.environ.update(local_server_environment(settings.home / "prefect", server.api_url))
        os.environ["PREFECT_API_URL"] = server.api_url  # before prefect is imported

        if server.note:
            typer.echo(f"pitstop up: {server.note}")
        typer.echo(f"Prefect UI:  {server.ui_url}")
        typer.echo(f"Prefect API: {server.api_url}")
        typer.echo(f"Slurm hooks must see PREFECT_API_URL={server.api_url} and "
                   f"PITSTOP_HOME={settings.home} (see scripts/slurm-hooks/)")

        stop = threading.Event()
        client = PrefectEventsClient(server.api_url, timeout_s=5.0)
        deliverer = threading.Thread(
            target=deliver_forever, name="pitstop-deliverer", daemon=True,
            args=(lambda: spools_to_deliver(settings.spool_dir), client, settings.triggers.spool_keep_sent,
                  settings.triggers.flush_interval_s, stop),
            kwargs={"on_report": lambda r: typer.echo(f"spool: {r.summary}")},
        )
        deliverer.start()

        def on_term(_signum, _frame):
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, on_term)
        try:
            from deployments.serve import build_deployments, serve_deployments

            deployments = build_deployments(settings)
            typer.echo("Serving: " + ", ".join(d.name for d in deployments))
            if settings.triggers.reconcile_interval_s > 0:
                from deployments.reconcile import reconcile_forever

                threading.Thread(target=reconcile_forever, name="pitstop-reconcile", daemon=True,
                                 args=(settings, stop, lambda m: typer.echo(m, err=True))).start()
                typer.echo(f"Reconciling every {settings.triggers.reconcile_interval_s:g} s "
                           f"(look-back {settings.triggers.reconcile_lookback_s:g} s)")
            serve_deployments(settings, deployments, on_message=lambda m: typer.echo(m, err=True))
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            server.stop()
            typer.echo("pitstop up: stopped")
