"""`pitstop node-check`: every local health check of this node, one verdict, exit 0/1/2.

Usable as Slurm's HealthCheckProgram or from a prolog: no Prefect, no database, well under a
second when DCGM is not requested.
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("node-check")
    def node_check(
        json_out: bool = typer.Option(False, "--json", help="print the NodeCheckReport as JSON"),
        checks: str | None = typer.Option(
            None, "--checks", help="comma list of nvml,xid,ib,disk,dcgm (default: settings)"
        ),
        dcgm_level: int | None = typer.Option(
            None, "--dcgm-level", min=1, max=4, help="dcgmi diag level 1-4 (implies the dcgm check)"
        ),
    ) -> None:
        """Check this node (GPUs, Xids, InfiniBand, disk, optionally DCGM). Exit 0 OK, 1 WARN, 2 FAIL."""
        from pitstop.config import ConfigError, load_settings
        from pitstop.node.check import CheckContext, UnknownCheck, parse_check_names, run_checks

        try:
            settings = load_settings()
            names = parse_check_names(checks, settings.node_check.checks)
        except (ConfigError, UnknownCheck) as exc:
            typer.echo(f"pitstop node-check: {exc}", err=True)
            raise typer.Exit(3) from exc
        if dcgm_level is not None and "dcgm" not in names:
            names.append("dcgm")
        report = run_checks(names, CheckContext(settings, dcgm_level=dcgm_level))
        if json_out:
            typer.echo(report.model_dump_json(indent=2))
        else:
            _print_table(report)
        raise typer.Exit(report.exit_code)


def _print_table(report) -> None:  # noqa: ANN001 - NodeCheckReport, imported lazily
    from rich.console import Console
    from rich.table import Table

    colour = {"OK": "green", "WARN": "yellow", "FAIL": "bold red", "UNAVAILABLE": "dim"}
    table = Table(title=f"{report.node}: {report.overall.value}  ({report.checked_at})")
    table.add_column("check")
    table.add_column("status")
    table.add_column("summary", overflow="fold")
    for check in report.checks:
        style = colour.get(check.status.value, "")
        table.add_row(check.name, f"[{style}]{check.status.value}[/]", check.summary)
    Console().print(table)
