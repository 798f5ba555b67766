"""`pitstop node-check`: every local health check of this node, one verdict, exit 0/1/2.

Usable as Slurm's HealthCheckProgram or from a prolog: no Prefect, no database, well under a
second when DCGM is not requested. The list of checks, their help and the default set come from
the registry (pitstop/node/registry.py, pure data: cheap to import).
"""

from __future__ import annotations

import typer


def _checks_epilog() -> str:
    from pitstop.node.registry import CHECKS

    lines = [f"{spec.name}{' *' if spec.default else ''}: {spec.help}" for spec in CHECKS.values()]
    return "Checks (* = run when --checks is not given):\n" + "\n".join(lines)


def register(app: typer.Typer) -> None:
    from pitstop.node.registry import CHECKS, default_checks

    @app.command("node-check", epilog=_checks_epilog())
    def node_check(
        json_out: bool = typer.Option(False, "--json", help="print the NodeCheckReport as JSON"),
        checks: str | None = typer.Option(
            None, "--checks",
            help=f"comma list of {','.join(CHECKS)} (default: setting node_check.checks, built in: {','.join(default_checks())})",
        ),
        dcgm_level: int | None = typer.Option(
            None, "--dcgm-level", min=1, max=4, help="dcgmi diag level 1-4 (implies the dcgm check)"
        ),
    ) -> None:
        """Check this node's GPUs, host and services. Exit 0 OK, 1 WARN, 2 FAIL (UNAVAILABLE counts as OK)."""
        # the same code as the typer-free fast path in pitstop/cli/entry.py
        from pitstop.cli.node_check_fast import Options, node_check

        raise typer.Exit(node_check(Options(json_out=json_out, checks=checks, dcgm_level=dcgm_level)))
