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
        from pitstop.metrics.exporter import MetricsServer

        metrics = MetricsServer(settings, server.api_url, on_message=lambda m: typer.echo(m, err=True))
        if metrics.start():
            typer.echo(f"Metrics:     {metrics.url}")

        def on_term(_signum, _frame):
            from tasks.approval import stop_waiting

            stop_waiting()  # runs waiting for approval leave at once and stay Paused (not denied)
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
            from tasks.approval import stop_waiting

            stop_waiting()  # Ctrl-C too: open questions stay open for the next `pitstop up`
            metrics.stop()
            _flush_prefect_workers()
            server.stop()
            typer.echo("pitstop up: stopped")


def _flush_prefect_workers(timeout_s: float = 5.0) -> None:
    """Send Prefect's queued events and logs while the server still answers: left for the
    interpreter's exit, their workers retry against a stopped server for about a minute (the
    slow shutdown that took a second SIGTERM)."""
    try:
        from prefect.events.worker import EventsWorker
        from prefect.logging.handlers import APILogWorker
    except ImportError:  # another Prefect layout: nothing queued we know of
        return
    for worker in (EventsWorker, APILogWorker):
        try:
            worker.drain_all(timeout=timeout_s)
        except Exception:  # best effort: shutdown must not fail on telemetry
            pass
