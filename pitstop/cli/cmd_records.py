"""`pitstop nodes`, `pitstop incidents`, `pitstop breaker status|reset`, `pitstop mode`.

All read the store alone, so they work with no scheduler reachable. SQLModel is imported inside
the commands to keep `pitstop --help` fast.
"""

from __future__ import annotations

import getpass
from datetime import datetime, timedelta, timezone
from typing import Optional

import typer

breaker_app = typer.Typer(help="Storm-guard circuit breakers: see and reset them.", no_args_is_help=True)


def _store():
    from pitstop.config import ConfigError, load_settings
    from pitstop.store import SchemaError, Store

    try:
        settings = load_settings()
        return settings, Store.from_settings(settings)
    except (ConfigError, SchemaError) as exc:
        typer.secho(f"pitstop: {exc}", err=True, fg="red")
        raise typer.Exit(2) from None
    except Exception as exc:  # unreachable or corrupt database: say which
        typer.secho(f"pitstop: cannot open the database ({type(exc).__name__}: {exc})", err=True, fg="red")
        raise typer.Exit(2) from None


def _ago(dt: datetime | None) -> str:
    if dt is None:
        return "-"
    dt = dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)
    secs = int((datetime.now(timezone.utc) - dt).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit} ago"
    return f"{max(secs, 0)}s ago"


def nodes_cmd(
    window_hours: float = typer.Option(72.0, "--window", help="count incidents in this many hours"),
    cluster: Optional[str] = typer.Option(None, help="only this cluster"),
) -> None:
    """Nodes Pitstop knows: state, who owns the drain, ladder rung, incidents, lemon and straggler flags."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from pitstop.store import records

    _, store = _store()
    since = datetime.now(timezone.utc) - timedelta(hours=window_hours)
    incidents = records.recent_incidents(store, cluster=cluster, since=since, limit=100_000)
    rows = records.list_nodes(store, cluster)
    stragglers = records.node_stragglers(store, cluster)
    table = Table(title=f"Nodes (incidents in the last {window_hours:g} h)")
    for col in ("cluster", "node", "state", "drain owner", "ladder rung", "incidents", "Xids", "lemon", "updated",
                "next step"):
        table.add_column(col)
    if stragglers:
        table.add_column("straggler (why)", overflow="fold")
    policy = _policy_or_none()
    for n in rows:
        count = sum(1 for i in incidents if i.cluster == n.cluster and n.name in (i.nodes or []))
        rung = f"{n.ladder} {n.ladder_rung + 1}" if n.ladder and n.ladder_rung is not None else "-"
        xids = ", ".join(f"{k}x{v}" for k, v in sorted((n.xid_counts or {}).items())) or "-"
        owner = {"pitstop": "pitstop", "foreign": "[yellow]someone else[/]"}.get(n.drain_owner, "-")
        lemon = "[red]LEMON[/]" if n.lemon else ""
        cells = [n.cluster, n.name, n.state or "?", owner, rung, str(count), xids, lemon, _ago(n.updated_at),
                 _next_step(store, policy, n)]
        if stragglers:
            flag = stragglers.get((n.cluster, n.name))
            # Text, not markup: rich would turn the ":AB:" of a PCI address into an emoji
            cells.append(Text.assemble((flag.detail, "yellow"), f" ({_ago(flag.at)})") if flag else "")
        table.add_row(*cells)
    console = Console()
    if not rows:
        console.print("No nodes recorded yet (they appear after the first sweep or incident).")
        return
    console.print(table)


def _policy_or_none():
    from pitstop.config import load_settings
    from pitstop.policy.model import PolicyError, policy_from_settings

    try:
        return policy_from_settings(load_settings())
    except (PolicyError, ValueError):
        return None


def _next_step(store, policy, n) -> str:
    """For a node Pitstop drained: what happens next (an approval, a ticket, an owner)."""
    if n.drain_owner != "pitstop":
        return "-"
    from pitstop.policy.decide import Decision
    from pitstop.policy.escalation import StepOutcome, node_end_states
    from pitstop.store import records

    try:
        incident = records.get_incident(store, n.last_incident_id) if n.last_incident_id else None
    except records.RecordError:
        incident = None
    if incident is None or not incident.decision or policy is None:
        return f"drained by pitstop (incident {n.last_incident_id or '?'}): check by hand"
    try:
        decision = Decision.model_validate(incident.decision)
    except ValueError:
        return f"incident {incident.id}: decision not readable by this version"
    outcomes = {a.seq: StepOutcome.from_journal(a.state, a.params) for a in records.journal(store, incident.id)}
    end = next((e for e in node_end_states(decision, policy, outcomes) if e.node == n.name), None)
    if end is None:
        return f"incident {incident.id}: no step for this node; handed to {policy.handover_to}"
    return f"incident {incident.id}: {end.detail}"


def incidents_cmd(
    limit: int = typer.Option(20, "--limit", "-n", min=1, help="how many, newest first"),
    cluster: Optional[str] = typer.Option(None, help="only this cluster"),
    explain: bool = typer.Option(False, "--explain", help="print each decision's explanation"),
) -> None:
    """Recent incidents with their cause and what was (or would have been) done."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from pitstop.store import records

    _, store = _store()
    rows = records.recent_incidents(store, cluster=cluster, limit=limit)
    console = Console()
    if not rows:
        console.print("No incidents recorded.")
        return
    table = Table(title="Recent incidents")
    for col in ("id", "when", "subject", "cause", "signature", "status", "actions"):
        table.add_column(col)
    for inc in rows:
        subject = f"job {inc.job_id}" if inc.kind == "job" else f"{inc.kind} {inc.node}"
        if inc.kind == "job" and inc.nodes:
            subject += f" on {','.join(inc.nodes[:3])}" + ("..." if len(inc.nodes) > 3 else "")
        acts = records.journal(store, inc.id)
        summary = ", ".join(f"{a.kind} {a.target}: {a.state}" for a in acts) or "-"
        if inc.kind == "switch":  # its members are the job incidents that name it
            summary = f"fabric incident of the leaf switch ({len(inc.nodes)} nodes); no action of its own"
        status = inc.status
        if any(_question(a).get("delivered") is False for a in acts if a.state == "awaiting_approval"):
            status += " [red](question NOT delivered)[/]"
        table.add_row(str(inc.id), _ago(inc.created_at), escape(subject), inc.cause, escape(inc.signature),
                      status, escape(summary))
    console.print(table)
    if explain:
        for inc in rows:
            lines = (inc.decision or {}).get("explain") or _explain(inc.decision)
            console.print(f"[bold]incident {inc.id}[/]")
            for line in lines:
                console.print("  " + escape(line))
            for act in records.journal(store, inc.id):  # what happened, with who answered and why
                console.print(f"  step {act.seq} {escape(act.kind)} {escape(act.target)}: {act.state}"
                              + (f" - {escape(act.result)}" if act.result else ""))
                asked = _question(act)
                if asked and asked.get("delivered") is False:
                    console.print(f"    [red]approval question NOT delivered[/]: {escape(str(asked.get('delivery')))}")


def _question(act) -> dict:
    """The approval question noted on a journal step (tasks.remediate), if any."""
    return dict((act.params or {}).get("approval") or {})


def _explain(decision: dict | None) -> list[str]:
    if not decision:
        return ["(no decision recorded)"]
    if "switch" in decision and "cause" not in decision:  # a leaf switch's fabric incident
        return [f"fabric incident of switch {decision['switch']}: opened by incident "
                f"{decision.get('opened_by_incident')} (first failure on the leaf {decision.get('first_at')}); "
                "the job incidents that joined it name it in their decision"]
    try:
        from pitstop.policy.decide import Decision

        return Decision.model_validate(decision).explain()
    except Exception as exc:  # written by another version: show what we can
        return [f"(decision not readable by this version: {type(exc).__name__})"]


@breaker_app.command("status")
def breaker_status() -> None:
    """Show every breaker and whether it is open."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from pitstop.store import records

    _, store = _store()
    rows = records.breakers(store)
    console = Console()
    if not rows:
        console.print("No breaker has ever tripped: automation is not held back.")
        return
    table = Table(title="Circuit breakers")
    for col in ("scope", "state", "since", "reason", "trips", "last reset"):
        table.add_column(col)
    for b in rows:
        state = "[red]OPEN[/]" if b.is_open else "closed"
        reset = f"{b.reset_by} {_ago(b.reset_at)}" if b.reset_by else "-"
        table.add_row(b.scope, state, _ago(b.opened_at), escape(b.reason or ""), str(b.trips), escape(reset))
    console.print(table)
    if any(b.is_open for b in rows):
        console.print("Automatic drains are stopped where a breaker is open. "
                      "Close one with: pitstop breaker reset --scope SCOPE")


@breaker_app.command("reset")
def breaker_reset(
    scope: Optional[str] = typer.Option(None, "--scope", help="cluster or partition:<name>; default: every open one"),
    comment: str = typer.Option("", "--comment", "-m", help="why it is safe to act again"),
) -> None:
    """Close a breaker (a human's decision): automatic drains may resume there."""
    from pitstop.store import records

    _, store = _store()
    open_now = records.open_breakers(store)
    scopes = [scope] if scope else sorted(open_now)
    if not scopes:
        typer.echo("No breaker is open.")
        return
    user = getpass.getuser()
    failed = False
    for sc in scopes:
        if records.reset_breaker(store, sc, by=user, comment=comment):
            typer.echo(f"breaker {sc} closed by {user}")
        else:
            known = ", ".join(sorted(open_now)) or "none"
            typer.secho(f"breaker {sc} is not open (open breakers: {known})", err=True, fg="yellow")
            failed = True
    if failed:
        raise typer.Exit(1)


def mode_cmd(
    mode: Optional[str] = typer.Argument(None, help="observe | canary | act; omit to show the mode"),
    partition: list[str] = typer.Option([], "--partition", "-p", help="canary: a partition to act on"),
    node: list[str] = typer.Option([], "--node", help="canary: a node to act on"),
) -> None:
    """Show or switch the remediation mode; flows pick it up at their next decision."""
    from pitstop.config import Mode
    from pitstop.store import records

    settings, store = _store()
    if mode is None:
        m = records.get_mode(store, default=settings.mode, default_canary_partitions=settings.policy.canary_partitions,
                             default_canary_nodes=settings.policy.canary_nodes)
        where = ""
        if m.mode is Mode.CANARY:
            where = " on " + (", ".join(m.canary_partitions + m.canary_nodes) or "nothing (no canary listed)")
        origin = f"set by {m.updated_by or '?'} {_ago(m.updated_at)}" if m.updated_at else "from settings"
        typer.echo(f"mode: {m.mode.value}{where} ({origin})")
        return
    try:
        new = Mode(mode.lower())
    except ValueError:
        typer.secho(f"unknown mode {mode!r}: choose observe, canary or act", err=True, fg="red")
        raise typer.Exit(2) from None
    parts = partition or (settings.policy.canary_partitions if new is Mode.CANARY else [])
    nodes = node or (settings.policy.canary_nodes if new is Mode.CANARY else [])
    if new is Mode.CANARY and not (parts or nodes):
        typer.secho("canary mode needs --partition or --node (or policy.canary_* in settings)", err=True, fg="red")
        raise typer.Exit(2)
    records.set_mode(store, new, by=getpass.getuser(), canary_partitions=parts, canary_nodes=nodes)
    typer.echo(f"mode is now {new.value}" + (f" on {', '.join(parts + nodes)}" if new is Mode.CANARY else ""))


def register(app: typer.Typer) -> None:
    app.command("nodes")(nodes_cmd)
    app.command("incidents")(incidents_cmd)
    app.command("mode")(mode_cmd)
    app.add_typer(breaker_app, name="breaker")
