"""`pitstop metrics`: the Prometheus exposition `pitstop up` serves on /metrics, printed once.

For hosts where Prometheus scrapes node_exporter instead: run it from cron with
`--output /var/lib/node_exporter/textfile/pitstop.prom` (written to a temporary file and renamed,
as the textfile collector requires, so it never reads half a file).
"""

from __future__ import annotations

from pathlib import Path

import typer


def _write_atomically(path: Path, data: bytes) -> None:
    import os

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def register(app: typer.Typer) -> None:
    @app.command(help="Print Pitstop's Prometheus metrics once (what `pitstop up` serves on /metrics). "
                      "Exit 0 every source answered, 1 some source is down (its lines on stderr, "
                      "the rest printed), 2 the output cannot be written.")
    def metrics(
        output: Path = typer.Option(None, "--output", "-o",
                                    help="write here (atomically, for node_exporter's textfile collector) "
                                         "instead of stdout"),
    ) -> None:
        from pitstop.config import load_settings
        from pitstop.events.deliver import resolve_api_url
        from pitstop.metrics.exporter import build_collector, describe_change, render
        from pitstop.store import Store

        settings = load_settings()
        api_url = resolve_api_url(settings.triggers.prefect_api_url) or (
            f"http://127.0.0.1:{settings.triggers.server_port}/api")  # `pitstop up`'s local server
        store = Store.from_settings(settings)
        try:
            collector = build_collector(settings, store, api_url)
            text = render(collector)
        finally:
            store.dispose()
        for result in collector.last_results:
            if not result.ok:
                typer.echo(f"pitstop {describe_change(result)}", err=True)
        if output is None:
            typer.echo(text.decode("utf-8"), nl=False)
        else:
            try:
                _write_atomically(output, text)
            except OSError as exc:
                typer.echo(f"pitstop metrics: cannot write {output}: {exc.strerror or exc}", err=True)
                raise typer.Exit(2) from None
        raise typer.Exit(0 if all(r.ok for r in collector.last_results) else 1)
