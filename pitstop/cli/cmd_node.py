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
        # the same code as the typer-free fast path in pitstop/cli/entry.py
        from pitstop.cli.node_check_fast import Options, node_check

        raise typer.Exit(node_check(Options(json_out=json_out, checks=checks, dcgm_level=dcgm_level)))
