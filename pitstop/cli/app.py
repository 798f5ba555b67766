"""Builds the typer app from one module per command group.

Each module in `COMMAND_MODULES` exposes `register(app)`. Modules import their heavy dependencies
(Prefect, SQLModel, paramiko) inside the command functions, so `pitstop --help` stays fast.
"""

from __future__ import annotations

import importlib

import typer

COMMAND_MODULES: tuple[str, ...] = (
    "pitstop.cli.cmd_records",  # nodes, incidents, breaker, mode
    "pitstop.cli.cmd_approvals",  # approvals (list, approve, deny)
    "pitstop.cli.cmd_run",  # run, runs
    "pitstop.cli.cmd_classify",  # classify
    "pitstop.cli.cmd_label",  # label, labels
    "pitstop.cli.cmd_rules",  # rules check, rules suggest
    "pitstop.cli.cmd_policy",  # policy check
    "pitstop.cli.cmd_node",  # node-check
    "pitstop.cli.cmd_hooks",  # epilog, prolog, spool
    "pitstop.cli.cmd_up",  # up
    "pitstop.cli.cmd_metrics",  # metrics
    "pitstop.cli.cmd_reconcile",  # reconcile
    "pitstop.cli.cmd_demo",  # demo
    "pitstop.cli.cmd_simulate",  # simulate
)


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="pitstop",
        help="Diagnose, remediate and report failed GPU jobs and unhealthy nodes.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_show_locals=False,
    )
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(app)
    return app
