"""`pitstop runs` and `pitstop runs show`: read the Run table, fall back to the run directories.

The run directory is the record of truth (the wrapper writes it even when the database is
locked or broken), so when the database cannot be read these commands still answer from disk.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, Field, field_validator

from pitstop.config import ConfigError, load_settings
from pitstop.secrets import redact_text


class RunView(BaseModel):
    id: str
    name: str | None = None
    command: list[str] = Field(default_factory=list)
    cwd: str = ""
    host: str = ""
    user: str = ""
    slurm_job_id: str | None = None
    run_dir: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    exit_code: int | None = None
    signal: int | None = None
    status: str = "unknown"
    cause: str | None = None
    signature: str | None = None
    confidence: float | None = None
    evidence: list[dict] = Field(default_factory=list)
    notify_status: str | None = None
    attachments_skipped: list[dict] = Field(default_factory=list)
    error: str | None = None
    source: str = Field(default="database", description="database | run directory")
    abandoned: bool = Field(default=False, description="recorded as running, but its wrapper is gone; not settled yet")

    @field_validator("notify_status", "error")
    @classmethod
    def _no_url_secrets(cls, text: str | None) -> str | None:
        """Runs recorded before every URL form was masked may still hold a token: never show it."""
        return redact_text(text) if text else text


def _err(message: str) -> None:
    print(f"pitstop: {message}", file=sys.stderr)


def _from_db(settings, limit: int | None = None, run_id: str | None = None) -> list[RunView]:
    from sqlmodel import col, select

    from pitstop.store import Store
    from pitstop.store.tables import Run

    store = Store(settings.effective_database_url)
    try:
        with store.session() as session:
            query = select(Run)
            if run_id is not None:
                query = query.where(col(Run.id).startswith(run_id))
            query = query.order_by(col(Run.started_at).desc())
            if limit is not None:
                query = query.limit(limit)
            return [RunView.model_validate(row.model_dump()) for row in session.exec(query)]
    finally:
        store.dispose()


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _from_dir(run_dir: Path) -> RunView | None:
    meta = _read_json(run_dir / "metadata.json")
    if not meta.get("id"):
        return None
    result = _read_json(run_dir / "result.json")
    verdict = _read_json(run_dir / "verdict.json")
    notify = _read_json(run_dir / "notify.json")
    status = result.get("status") or ("not_started" if (run_dir / "error.txt").exists() else "running?")
    try:
        return RunView(
            id=meta["id"], name=meta.get("name"), command=meta.get("command") or [],
            cwd=meta.get("cwd", ""), host=meta.get("host", ""), user=meta.get("user", ""),
            slurm_job_id=meta.get("slurm_job_id"), run_dir=str(run_dir),
            started_at=meta.get("started_at"), ended_at=result.get("ended_at"),
            exit_code=result.get("exit_code"), signal=result.get("signal"), status=status,
            cause=verdict.get("cause"), signature=verdict.get("signature"),
            confidence=verdict.get("confidence"), evidence=verdict.get("evidence") or [],
            notify_status=notify.get("status"),
            attachments_skipped=result.get("attachments_skipped") or [],
            error=result.get("launch_error") or result.get("note"), source="run directory",
        )
    except ValueError:
        return None


def _from_dirs(settings, limit: int | None = None, run_id: str | None = None) -> list[RunView]:
    try:
        names = sorted((p.name for p in settings.runs_dir.iterdir() if p.is_dir()), reverse=True)
    except OSError:
        return []
    if run_id is not None:
        names = [n for n in names if n.startswith(run_id)]
    views = []
    for name in names:
        view = _from_dir(settings.runs_dir / name)
        if view is not None:
            views.append(view)
        if limit is not None and len(views) >= limit:
            break
    return views


def _load(limit: int | None = None, run_id: str | None = None) -> list[RunView] | None:
    try:
        settings = load_settings()
    except ConfigError as exc:
        _err(str(exc))
        return None
    try:
        views = _from_db(settings, limit, run_id)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        _err(f"warning: cannot read the database ({redact_text(first[:300])}); reading {settings.runs_dir} instead")
        views = _from_dirs(settings, limit, run_id)
    else:
        # A run whose row never made it (wrapper killed before its background write, a locked
        # database) is still on disk: show it from there.
        known = {v.id for v in views}
        extra = [v for v in _from_dirs(settings, limit, run_id) if v.id not in known]
        if extra:
            views = sorted(views + extra, key=_start_key, reverse=True)[:limit]
    return [_marked(v) for v in views]


def _start_key(view: RunView) -> datetime:
    from datetime import timezone

    at = view.started_at or datetime.min
    return at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at  # the database's are naive UTC


def _marked(view: RunView) -> RunView:
    """A "running" run whose wrapper is gone (same host, not that process any more) is shown as
    what it is; `pitstop runs show` settles it (classifies its logs and records that)."""
    from pitstop.wrapper.settle import abandoned

    if view.run_dir and abandoned(Path(view.run_dir), view.status):
        return view.model_copy(update={"status": KILLED, "abandoned": True})
    return view


KILLED = "wrapper_killed"
STATUS_TEXT = {KILLED: "wrapper killed"}


def _settle(view: RunView) -> RunView:
    from pitstop.cli.run_classifier import classify_logs
    from pitstop.wrapper.settle import record_in_store, settle

    settings = load_settings()
    settle(Path(view.run_dir), classify_logs, settings.wrapper.classify_timeout_s,
           record_in_store(settings.effective_database_url, Path(view.run_dir)))
    again = _load(run_id=view.id) or []
    return next((v for v in again if v.id == view.id), view)


def _when(dt: datetime | None) -> str:
    return dt.strftime("%Y-%m-%d %H:%M:%S") if dt else "-"


def _duration(view: RunView) -> str:
    if view.started_at and view.ended_at:
        from pitstop.wrapper.report import duration_text

        return duration_text((view.ended_at - view.started_at).total_seconds())
    return "-"


def list_runs(limit: int, as_json: bool) -> int:
    views = _load(limit=limit)
    if views is None:
        return 1
    if as_json:
        print(json.dumps([v.model_dump(mode="json") for v in views], indent=2))
        return 0
    if not views:
        print("No runs yet. Try: pitstop run -- echo hello")
        return 0
    from rich.console import Console
    from rich.table import Table

    from pitstop.wrapper.report import command_text

    from rich import box

    table = Table(title=f"Most recent {len(views)} run(s)", box=box.SIMPLE, pad_edge=False)
    for column in ("ID", "Started (UTC)", "Status", "Exit", "Cause", "Duration", "Command"):
        table.add_column(column, overflow="fold", no_wrap=column != "Command")
    style = {"succeeded": "green", "failed": "red", "not_started": "red", "running": "yellow", KILLED: "red"}
    for v in views:
        cmd = command_text(v.command)
        table.add_row(
            v.id, v.started_at.strftime("%m-%d %H:%M:%S") if v.started_at else "-",
            f"[{style.get(v.status, 'white')}]{STATUS_TEXT.get(v.status, v.status)}[/]",
            "-" if v.exit_code is None else str(v.exit_code), v.cause or "-", _duration(v),
            (f"{v.name}: " if v.name else "") + (cmd if len(cmd) <= 80 else cmd[:79] + "…"),
        )
    console = Console()
    if not console.is_terminal:  # piped or captured: do not squeeze the table to 80 columns
        console = Console(width=160)
    console.print(table)
    return 0


def show_run(run_id: str, as_json: bool) -> int:
    views = _load(run_id=run_id)
    if views is None:
        return 1
    if not views:
        _err(f"no run with id {run_id!r}; `pitstop runs` lists the recent ones")
        return 1
    if len(views) > 1 and not any(v.id == run_id for v in views):
        _err(f"{run_id!r} matches {len(views)} runs ({', '.join(v.id for v in views[:5])}...); give more of the id")
        return 1
    view = next((v for v in views if v.id == run_id), views[0])
    if view.abandoned:
        view = _settle(view)  # classify what the killed wrapper left, and record it: once
    if as_json:
        print(view.model_dump_json(indent=2))
        return 0
    from pitstop.wrapper.excerpt import human_bytes, printable
    from pitstop.wrapper.report import command_text

    exit_text = "-" if view.exit_code is None else str(view.exit_code)
    if view.signal:
        import signal as _signal

        try:
            exit_text += f" (killed by {_signal.Signals(view.signal).name})"
        except ValueError:
            exit_text += f" (killed by signal {view.signal})"
    conf = f", confidence {view.confidence:.2f}" if view.confidence is not None else ""
    lines = [
        f"Run:        {view.id}" + (f" ({view.name})" if view.name else ""),
        f"Status:     {STATUS_TEXT.get(view.status, view.status)}",
        f"Cause:      {view.cause or '-'} (signature {view.signature or '-'}{conf})",
        f"Exit code:  {exit_text}",
        f"Command:    {command_text(view.command)}",
        f"Directory:  {printable(view.cwd)}",
        f"Host/user:  {view.host} / {view.user}" + (f"   Slurm job {view.slurm_job_id}" if view.slurm_job_id else ""),
        f"Started:    {_when(view.started_at)}   Ended: {_when(view.ended_at)}   Duration: {_duration(view)}",
        f"Run dir:    {view.run_dir}",
        f"Notify:     {view.notify_status or '-'}",
    ]
    if view.error:
        lines.append(f"Error:      {printable(view.error, 1000)}")
    lines.append("Evidence:")
    lines += [
        f"  {e.get('source', 'log')}:{e.get('line', 0)}: {printable(str(e.get('text', '')))}" for e in view.evidence
    ] or ["  (none)"]
    if view.attachments_skipped:
        lines.append("Not attached:")
        for s in view.attachments_skipped:
            size = f" ({human_bytes(s['size'])})" if s.get("size") is not None else ""
            lines.append(f"  - {s.get('name')}{size}: {s.get('reason')}")
    run_dir = Path(view.run_dir)
    for log in ("combined.log", "stdout.log", "stderr.log"):
        try:
            lines.append(f"Log:        {run_dir / log} ({human_bytes((run_dir / log).stat().st_size)})")
        except OSError:
            pass
    if view.source != "database":
        lines.append(f"(read from the {view.source}; the database had no usable record)")
    print("\n".join(lines))
    return 0
