"""`pitstop node-check` without typer: it runs on every node of every health sweep (over SSH)
and as a prolog check, so its start-up is paid fleet-wide many times an hour.

Only the plain spellings are handled here (`--json`, `--checks X` / `--checks=X`,
`--dcgm-level N` / `--dcgm-level=N` with N in 1-4, each at most once). Anything else (help, a
typo, a bad value) goes to typer, which answers exactly as it always did. Both paths run the
same `node_check()`, so the output is the same byte for byte.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass
class Options:
    json_out: bool = False
    checks: str | None = None
    dcgm_level: int | None = None


def parse(argv: list[str]) -> Options | None:
    """The options, or None when typer should parse them (and word any error)."""
    opts, seen, args = Options(), set(), list(argv)
    while args:
        arg = args.pop(0)
        name, has_value, value = arg.partition("=")
        if name in seen:
            return None
        seen.add(name)
        if arg == "--json":
            opts.json_out = True
            continue
        if name not in ("--checks", "--dcgm-level"):
            return None
        if not has_value:
            if not args or args[0].startswith("-"):
                return None
            value = args.pop(0)
        if name == "--checks":
            opts.checks = value
        elif value.isdigit() and 1 <= int(value) <= 4:
            opts.dcgm_level = int(value)
        else:
            return None
    return opts


def node_check(opts: Options) -> int:
    """Run the checks, print the report; returns the exit code (0 OK, 1 WARN, 2 FAIL, 3 usage)."""
    from pitstop.config import ConfigError, load_settings
    from pitstop.node.check import CheckContext, UnknownCheck, parse_check_names, run_checks

    try:
        settings = load_settings()
        names = parse_check_names(opts.checks, settings.node_check.checks)
    except (ConfigError, UnknownCheck) as exc:
        print(f"pitstop node-check: {exc}", file=sys.stderr, flush=True)
        return 3
    if opts.dcgm_level is not None and "dcgm" not in names:
        names.append("dcgm")
    report = run_checks(names, CheckContext(settings, dcgm_level=opts.dcgm_level))
    if opts.json_out:
        print(report.model_dump_json(indent=2), flush=True)
    else:
        print_table(report)
    return report.exit_code


def print_table(report) -> None:  # noqa: ANN001 - NodeCheckReport, imported lazily
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
