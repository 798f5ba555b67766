"""`pitstop policy check`: is this remediation policy usable, and if not, which line is wrong.

Each subcommand is one function on `policy_app`; the policy package is imported inside it, so
`pitstop --help` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

policy_app = typer.Typer(
    help="The remediation policy: check a policy file before the flows use it.",
    no_args_is_help=True,
)

# Paragraphs are single lines: the help renderer keeps line breaks as written.
CHECK_HELP = "\n\n".join([
    "Validate a policy file and name the line and field of each error (all of them).",
    "Prints FILE:LINE: FIELD: what is wrong, for each error; or, for a valid policy, one summary "
    "line: rules, ladders and, as warnings, causes with no catch-all rule (they get `fallback`). "
    "Without FILE: the configured policy (policy.file, PITSTOP_POLICY__FILE), else the built-in default.",
    "Exit codes:\n"
    "  0  valid\n"
    "  1  invalid (each error printed)\n"
    "  2  usage error, or a file that cannot be read",
])


def _summary(source: str, policy) -> dict:
    uncovered = [c.value for c in policy.uncovered_causes()]
    return {
        "file": source,
        "valid": True,
        "rules": len(policy.rules),
        "ladders": len(policy.ladders),
        "uncovered_causes": uncovered,
        "fallback": [a.kind for a in policy.fallback],
        "errors": [],
    }


def _summary_line(s: dict) -> str:
    line = f"{s['file']}: valid: {s['rules']} rules, {s['ladders']} ladders"
    if s["uncovered_causes"]:
        line += (f"; warning: no catch-all rule for {', '.join(s['uncovered_causes'])} "
                 f"(they get the fallback: {', '.join(s['fallback'])})")
    return line


@policy_app.command("check", help=CHECK_HELP)
def check(
    file: Optional[Path] = typer.Argument(None, help="policy YAML (default: the configured one)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object: valid, errors [{line, loc, msg}], counts"),
) -> None:
    from pitstop.policy.model import PolicyError, PolicyUnreadable, load_policy

    if file is None:
        from pitstop.config import ConfigError, load_settings

        try:
            file = load_settings().policy.file
        except ConfigError as exc:
            typer.echo(f"pitstop policy check: {exc}", err=True)
            raise typer.Exit(2) from None
    source = str(file) if file is not None else "(built-in default)"
    try:
        policy = load_policy(file)
    except PolicyUnreadable as exc:
        if as_json:
            typer.echo(json.dumps(_failed(exc)))
        typer.echo(f"pitstop policy check: {exc}", err=True)
        raise typer.Exit(2) from None
    except PolicyError as exc:
        if as_json:
            typer.echo(json.dumps(_failed(exc)))
        else:
            for issue in exc.issues:
                typer.echo(issue.render(exc.source))
            n = len(exc.issues)
            typer.echo(f"{exc.source}: {n} error{'s' if n != 1 else ''}; this policy cannot be used")
        raise typer.Exit(1) from None
    summary = _summary(source, policy)
    typer.echo(json.dumps(summary) if as_json else _summary_line(summary))


def _failed(exc) -> dict:
    return {
        "file": exc.source,
        "valid": False,
        "errors": [{"line": i.line, "loc": i.path, "msg": i.msg} for i in exc.issues],
    }


def register(app: typer.Typer) -> None:
    app.add_typer(policy_app, name="policy")
