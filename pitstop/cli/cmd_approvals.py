"""`pitstop approvals`: what waits for a human, and approve / deny from a terminal.

The list comes from the action journal (every open question is noted on its steps by
tasks.remediate: key, steps, deadline, run, whether the mail went out). An answer resumes the
paused flow run with the same form the Prefect UI submits (`ApprovalForm`: decision, approver,
comment), so the flow writes the same journal entries whichever way the answer came.
"""

from __future__ import annotations

import getpass
from datetime import datetime, timezone
from typing import Optional

import typer
from pydantic import BaseModel, Field

approvals_app = typer.Typer(help="Questions waiting for a human: list (default), approve, deny.",
                            no_args_is_help=False, invoke_without_command=True)


class PendingQuestion(BaseModel):
    """One open question: one per incident and plan round (it may cover several steps)."""

    incident_id: int
    key: str = ""
    subject: str
    nodes: list[str] = Field(default_factory=list)
    cause: str
    steps: list[str] = Field(default_factory=list, description="'seq kind target' of each step it covers")
    deadline: datetime | None = None
    delivered: bool | None = None
    delivery: str = ""
    flow_run_id: str | None = None
    flow_run_url: str | None = None

    def left(self, now: datetime) -> str:
        if self.deadline is None:
            return "?"
        secs = int((self.deadline - now).total_seconds())
        if secs <= 0:
            return "past (denied when the run next looks)"
        return f"{secs // 3600}h{secs % 3600 // 60:02d}m" if secs >= 3600 else f"{secs // 60}m{secs % 60:02d}s"


def pending_questions(incidents, journal_of) -> list[PendingQuestion]:
    """Group the journal's awaiting_approval steps by question (pure: `journal_of(id)` gives rows)."""
    found: list[PendingQuestion] = []
    for inc in incidents:
        by_key: dict[str, PendingQuestion] = {}
        for row in journal_of(inc.id):
            if row.state != "awaiting_approval":
                continue
            asked = dict((row.params or {}).get("approval") or {})
            if not asked:  # planned, not asked yet (an earlier step still runs)
                continue
            key = str(asked.get("key") or f"incident-{inc.id}")
            subject = f"job {inc.job_id}" if inc.kind == "job" else f"node {inc.node}"
            question = by_key.setdefault(key, PendingQuestion(
                incident_id=inc.id, key=key, subject=subject, nodes=list(inc.nodes or []),
                cause=f"{inc.cause} ({inc.signature})", deadline=_time(asked.get("deadline")),
                delivered=asked.get("delivered"), delivery=str(asked.get("delivery") or ""),
                flow_run_id=asked.get("flow_run_id"), flow_run_url=asked.get("flow_run_url")))
            question.steps.append(f"{row.seq} {row.kind} {row.target}")
        found.extend(by_key.values())
    return found


def _time(value) -> datetime | None:
    try:
        dt = datetime.fromisoformat(value) if isinstance(value, str) and value else None
    except ValueError:
        return None
    return dt if dt is None or dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def _load() -> list[PendingQuestion]:
    from pitstop.cli.cmd_records import _store
    from pitstop.store import records

    _, store = _store()
    waiting = [i for i in records.recent_incidents(store, limit=10_000) if i.status == "awaiting_approval"]
    return pending_questions(waiting, lambda incident_id: records.journal(store, incident_id))


@approvals_app.callback()
def list_cmd(ctx: typer.Context) -> None:
    """List what waits for an answer (incident, node, cause, steps, deadline, run link)."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    questions = _load()
    console = Console()
    if not questions:
        console.print("Nothing waits for approval.")
        return
    now = datetime.now(timezone.utc)
    table = Table(title=f"Waiting for approval ({len(questions)})")
    for column in ("incident", "subject", "nodes", "cause", "steps", "deadline", "left", "mail", "run"):
        table.add_column(column)
    for q in questions:
        deadline = q.deadline.strftime("%Y-%m-%d %H:%M:%S UTC") if q.deadline else "?"
        mail = {True: "sent", False: "[red]NOT DELIVERED[/]", None: "?"}[q.delivered]
        table.add_row(str(q.incident_id), escape(q.subject), escape(", ".join(q.nodes)), escape(q.cause),
                      escape("; ".join(q.steps)), deadline, q.left(now), mail, escape(q.flow_run_url or q.flow_run_id or "-"))
    console.print(table)
    console.print("Answer with: pitstop approvals approve|deny INCIDENT --comment \"why\"")


def _answer(incident_id: int, decision: str, comment: str, by: Optional[str]) -> None:
    questions = [q for q in _load() if q.incident_id == incident_id]
    if not questions:
        typer.secho(f"incident {incident_id} has no open approval question (see `pitstop approvals`)",
                    err=True, fg="yellow")
        raise typer.Exit(1)
    question = questions[0]  # one per incident at a time: the flow asks one round after the other
    if not question.flow_run_id:
        typer.secho(f"incident {incident_id}: the question names no flow run; answer it in the Prefect UI",
                    err=True, fg="red")
        raise typer.Exit(2)
    approver = (by or getpass.getuser()).strip()
    result = _resume(question.flow_run_id, {"decision": decision, "approver": approver, "comment": comment})
    if result is not None:
        typer.secho(f"incident {incident_id}: {result}", err=True, fg="red")
        raise typer.Exit(2)
    word = "approved" if decision == "approve" else "denied"
    typer.echo(f"incident {incident_id}: {word} by {approver} ({'; '.join(question.steps)}); "
               f"the flow run {question.flow_run_id} carries it out")


def _resume(flow_run_id: str, run_input: dict) -> str | None:
    """Resume the paused run with the form's input; None on success, else why not."""
    import os
    from uuid import UUID

    from pitstop.config import load_settings
    from pitstop.events.deliver import resolve_api_url

    settings = load_settings()
    api_url = resolve_api_url(settings.triggers.prefect_api_url) or (
        f"http://127.0.0.1:{settings.triggers.server_port}/api")  # `pitstop up`'s local server
    os.environ["PREFECT_API_URL"] = api_url
    try:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            state = client.read_flow_run(UUID(flow_run_id)).state
            if state is None or not state.is_paused():
                name = state.name if state is not None else "unknown"
                return (f"flow run {flow_run_id} is {name}, not Paused: its process is gone or it was answered; "
                        "`pitstop reconcile` re-runs it and it asks again")
            outcome = client.resume_flow_run(UUID(flow_run_id), run_input=run_input)
    except Exception as exc:  # unreachable server, bad id: say which
        return f"cannot reach the Prefect API at {api_url} ({type(exc).__name__}: {exc})"
    if str(outcome.status.value).upper() != "ACCEPT":
        return f"the Prefect server refused the answer: {outcome.details.reason or outcome.status.value}"
    return None


@approvals_app.command("approve")
def approve_cmd(
    incident: int = typer.Argument(..., help="the incident id (`pitstop approvals` lists them)"),
    comment: str = typer.Option("", "--comment", "-m", help="why (kept in the incident's journal)"),
    by: Optional[str] = typer.Option(None, "--by", help="your name (default: your login name)"),
) -> None:
    """Approve every step of the incident's open question; the paused run carries them out."""
    _answer(incident, "approve", comment, by)


@approvals_app.command("deny")
def deny_cmd(
    incident: int = typer.Argument(..., help="the incident id (`pitstop approvals` lists them)"),
    comment: str = typer.Option("", "--comment", "-m", help="why (kept in the incident's journal)"),
    by: Optional[str] = typer.Option(None, "--by", help="your name (default: your login name)"),
) -> None:
    """Deny every step of the incident's open question."""
    _answer(incident, "deny", comment, by)


def register(app: typer.Typer) -> None:
    app.add_typer(approvals_app, name="approvals")
