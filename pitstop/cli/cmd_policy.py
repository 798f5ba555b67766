"""`pitstop policy check`: is this remediation policy usable, and if not, which line is wrong.
`pitstop policy explain`: what the flows would decide for given evidence, touching nothing.

Each subcommand is one function on `policy_app`; the policy package is imported inside it, so
`pitstop --help` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

policy_app = typer.Typer(
    help="The remediation policy: check a policy file, or explain what it decides for given evidence.",
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


EXPLAIN_HELP = "\n\n".join([
    "Print the decision the flows would make, touching nothing: cause, suspects (the nodes the "
    "evidence names), and each planned action with its reason, in the current mode.",
    "Evidence: a job log (--log, repeatable), kernel logs per node (--kernel-log gpu03=dmesg.txt), "
    "an Xid (--xid 79 --node gpu01), or a cause and signature (--cause gpu_hardware --signature xid-79); "
    "--nodes gives the job's nodes (a Slurm hostlist), --flight-recorder a dump file or directory.",
    "The history is empty (a first occurrence) and every node idle. Exit 0, or 2 for bad input.",
])


def _kernel_logs(values: list[str], node: str | None) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep:
            if node is None:
                raise typer.BadParameter(f"{value!r}: give the node as NODE=PATH (or use --node)", param_hint="--kernel-log")
            name, path = node, value
        out[name] = Path(path)
    return out


@policy_app.command("explain", help=EXPLAIN_HELP)
def explain_cmd(
    log: list[Path] = typer.Option([], "--log", help="the job's log file (repeatable)"),
    kernel_log: list[str] = typer.Option([], "--kernel-log", help="NODE=PATH of a node's kernel log (repeatable)"),
    xid: Optional[int] = typer.Option(None, "--xid", help="an Xid, as if the node's kernel log showed it"),
    node: Optional[str] = typer.Option(None, "--node", help="the node the alarm or Xid is on"),
    cause: Optional[str] = typer.Option(None, "--cause", help="skip classification: this cause ..."),
    signature: Optional[str] = typer.Option(None, "--signature", help="... with this signature (e.g. xid-79)"),
    nodes: Optional[str] = typer.Option(None, "--nodes", help="the job's nodes, e.g. gpu[01-04]"),
    tasks_per_node: Optional[str] = typer.Option(None, "--tasks-per-node", help="ranks per node, e.g. 8(x4)"),
    state: Optional[str] = typer.Option(None, "--state", help="the job's Slurm state, e.g. NODE_FAIL"),
    flight_recorder: list[Path] = typer.Option([], "--flight-recorder", help="NCCL flight-recorder dump or folder"),
    mode: Optional[str] = typer.Option(None, "--mode", help="observe | canary | act (default: the configured mode)"),
    policy_file: Optional[Path] = typer.Option(None, "--policy", help="policy YAML (default: the configured one)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object: cause, signature, suspects, actions [{kind, target, why}]"),
) -> None:
    from pydantic import ValidationError

    from pitstop.cli.policy_explain import ExplainRequest, explain
    from pitstop.cluster.base import InvalidIdentifier
    from pitstop.cluster.hostlist import HostlistError, expand
    from pitstop.config import ConfigError, Mode, load_settings
    from pitstop.policy.model import PolicyError, load_policy
    from pitstop.policy.safety import ModeState

    def fail(message: str) -> None:
        typer.echo(f"pitstop policy explain: {message}", err=True)
        raise typer.Exit(2)

    if not (log or kernel_log or xid is not None or cause):
        fail("give some evidence: --log, --kernel-log, --xid or --cause (see --help)")
    try:
        settings = load_settings()
        policy = load_policy(policy_file if policy_file is not None else settings.policy.file)
        chosen = Mode(mode) if mode else settings.mode
        req = ExplainRequest(
            logs=log, kernel_logs=_kernel_logs(kernel_log, node), xid=xid, node=node, cause=cause,
            signature=signature, nodes=expand(nodes) if nodes else [], tasks_per_node=tasks_per_node,
            state=state.upper() if state else None, flight_recorder=flight_recorder,
        )
        missing = [str(p) for p in [*req.logs, *req.kernel_logs.values()] if not p.is_file()]
        if missing:
            fail("not a readable file: " + ", ".join(missing))
        view = explain(req, policy, ModeState(mode=chosen, canary_partitions=list(settings.policy.canary_partitions),
                                              canary_nodes=list(settings.policy.canary_nodes)))
    except (ConfigError, PolicyError, InvalidIdentifier, HostlistError, ValidationError, ValueError, OSError) as exc:
        fail(str(exc).splitlines()[0] if not isinstance(exc, PolicyError) else str(exc))
        return
    if as_json:
        typer.echo(view.model_dump_json())
        return
    typer.echo(f"cause: {view.cause} ({view.signature}, confidence {view.confidence:.2f})")
    typer.echo(f"rule: {view.rule}" + (f" - {view.rule_description}" if view.rule_description else ""))
    typer.echo(f"mode: {view.mode}")
    for s in view.suspects:
        typer.echo(f"suspect {s.node} ({'hardware' if s.hardware else 'logs only'}): {'; '.join(s.reasons[:3])}")
    for a in view.actions:
        typer.echo(f"{a.seq + 1}. {a.describe}\n     why: {a.why}")
    for note in view.notes:
        typer.echo(f"note: {note}")


def register(app: typer.Typer) -> None:
    app.add_typer(policy_app, name="policy")
