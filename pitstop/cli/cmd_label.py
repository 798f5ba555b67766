"""`pitstop label INCIDENT CAUSE`: an operator corrects an incident's cause; `pitstop labels`
lists the corrections. `labelled_examples(store)` turns them into scoring examples for
`pitstop classify --eval --labelled` and `pitstop rules suggest`.

The label keeps a bounded excerpt of the job's logs (pitstop.store.labels): from --log, else the
paths the scheduler still knows for the job, else the incident's stored evidence lines.
"""

from __future__ import annotations

import getpass
import json
import os
from pathlib import Path
from typing import Optional

import typer

LABEL_HELP = "\n\n".join([
    "Record an operator's correction of an incident's cause (the newest label wins; older ones are kept).",
    "CAUSE is one of: gpu_hardware, gpu_memory, nccl_timeout, network_fabric, cuda_oom, host_oom, numerical, "
    "software_bug, environment, storage_io, time_limit, preempted, node_failure, crash_signal, success, unknown.",
    "A bounded excerpt of the job's logs is kept with the label (tail, error-like lines, the classifier's hits), so "
    "`pitstop classify --eval --labelled` and `pitstop rules suggest` still work once the logs are rotated away. "
    "The logs come from --log, else the scheduler's record of the job, else only the incident's stored evidence "
    "lines are kept. Re-labelling without --log keeps the earlier snapshot.",
    "Exit codes:\n  0  labelled\n  1  no such incident\n  2  usage error (unknown cause, unusable settings or database)",
])


def _fail(message: str, code: int) -> typer.Exit:
    typer.secho(f"pitstop label: {message}", err=True, fg="red")
    return typer.Exit(code)


def _who(by: str | None) -> str:
    if by:
        return by
    try:
        return os.environ.get("USER") or getpass.getuser()
    except Exception:  # no passwd entry (a container): still record something
        return "unknown"


def _utc(dt):
    """Naive times are UTC, as the store keeps them."""
    from datetime import timezone

    return None if dt is None else (dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc))


def _scheduler_logs(settings, incident) -> tuple[list[Path], object | None, str | None]:
    """(log paths, scheduler facts, why not) from the scheduler's record of the incident's job."""
    from pitstop.models import SchedulerFacts

    if incident.kind != "job" or not incident.job_id:
        return [], None, "a node incident has no job log"
    cluster = "demo" if settings.cluster == "demo" else settings.slurm.cluster_name
    if incident.cluster != cluster:
        return [], None, f"the incident is on cluster {incident.cluster!r}, the settings name {cluster!r}"
    try:
        from pitstop.cluster.factory import demo_root, make_scheduler

        if settings.cluster == "demo" and not demo_root(settings).exists():
            return [], None, "no demo cluster here"
        job = make_scheduler(settings).job(incident.job_id)
    except Exception as exc:  # unreachable scheduler, purged job: label anyway, say why
        return [], None, f"the scheduler has no record of job {incident.job_id} ({exc})"
    paths = [Path(p) for p in dict.fromkeys((job.stdout_path, job.stderr_path)) if p and "%" not in p]
    readable = [p for p in paths if p.is_file()]
    facts = None
    end, job_end = _utc(incident.end_time), _utc(job.end_time)
    if end is None or job_end is None or abs((job_end - end).total_seconds()) < 2:
        # The same run the incident is about (a requeued job shows its next run's state instead).
        facts = SchedulerFacts(state=job.state, exit_code=job.exit_code, signal=job.signal, reason=job.reason)
    if not readable:
        return [], facts, f"job {incident.job_id}'s logs ({', '.join(map(str, paths)) or 'none recorded'}) are not readable here"
    return readable, facts, None


def _classifier_marks(paths: list[Path]) -> dict[str, dict[int, str]]:
    """The lines the classifier's rules hit anywhere in each log: first and last of each rule."""
    from classifiers import scan_logs
    from classifiers.hits import ProgressHit
    from pitstop.files import open_regular

    marks: dict[str, dict[int, str]] = {}
    for path in paths:
        try:
            scan = scan_logs([path], open_log=open_regular)
        except (OSError, ValueError):
            continue  # excerpt_logs names the unreadable file
        lines: dict[int, str] = {}
        for hit in scan.sources[0]:
            if isinstance(hit, ProgressHit):
                lines.update(dict(hit.evidence))
                continue
            lines[hit.line] = hit.text
            if hit.last_line is not None:
                lines[hit.last_line] = hit.last_text or ""
        marks[str(path)] = lines
    return marks


def label(
    incident: int = typer.Argument(..., help="incident id (`pitstop incidents` lists them)"),
    cause: str = typer.Argument(..., help="the right cause, e.g. environment"),
    note: str = typer.Option("", "--note", help="why: it becomes the hint of a rule suggested from it"),
    by: Optional[str] = typer.Option(None, "--by", help="who labels (default: $USER)"),
    logs: Optional[list[Path]] = typer.Option(None, "--log", help="the job's log file(s) to snapshot (repeatable)"),
    as_json: bool = typer.Option(False, "--json", help="print the label as JSON"),
) -> None:
    from pitstop.cli.cmd_records import _store
    from pitstop.models import Cause
    from pitstop.store import labels
    from pitstop.store.records import RecordError, get_incident

    try:
        right = Cause(cause.strip().lower())
    except ValueError:
        raise _fail(f"{cause!r} is not a cause; use one of: {', '.join(c.value for c in Cause)}", 2) from None
    settings, store = _store()
    try:
        row = get_incident(store, incident)
    except RecordError as exc:
        raise _fail(f"{exc}", 1) from None
    problems: list[str] = []
    excerpt = facts = None
    paths = list(logs or [])
    if not paths:
        previous = labels.label_history(store, incident)
        if not previous:  # a re-label keeps the first snapshot unless told otherwise
            paths, facts, why = _scheduler_logs(settings, row)
            if why:
                problems.append(why)
    if paths:
        excerpt, unreadable = labels.excerpt_logs(paths, _classifier_marks(paths))
        problems += unreadable
        if not excerpt.sources:
            excerpt = None
    kernel_path = settings.home / "incidents" / str(incident) / "kernel.log"
    kernel = labels.kernel_excerpt(kernel_path) if kernel_path.is_file() else None
    record = labels.record_label(store, labels.LabelInput(
        incident_id=incident, cause=right, by=_who(by), note=note, excerpt=excerpt, kernel_excerpt=kernel,
        facts=facts))
    store.dispose()
    if as_json:
        typer.echo(record.model_dump_json())
    else:
        _print_label(record, problems)


def _print_label(record, problems: list[str]) -> None:
    from classifiers import classify_text

    was = f"{record.predicted_cause} ({record.predicted_signature})" if record.predicted_signature else record.predicted_cause
    typer.echo(f"incident {record.incident_id}: labelled {record.cause.value} by {record.labelled_by} (Pitstop said {was})")
    for source in record.sources:
        size = f", {source.size} bytes" if source.size is not None else ""
        typer.echo(f"  kept {source.lines} line{'' if source.lines == 1 else 's'} of {source.path}{size}")
    if record.kernel_excerpt:
        typer.echo(f"  kept {len(record.kernel_excerpt.splitlines())} kernel log lines")
    for problem in problems:
        typer.secho(f"  note: {problem}", err=True, fg="yellow")
    if record.sources and record.sources[0].path == "(stored evidence lines)":
        typer.secho("  only the stored evidence lines were kept: pass --log PATH to snapshot the job's log",
                    err=True, fg="yellow")
    now = classify_text(record.excerpt, record.facts, record.kernel_excerpt)
    agree = "agree" if now.cause is record.cause else "disagree"
    typer.echo(f"  the rules now say {now.cause.value} ({now.signature}) on the kept excerpt: they {agree}")


def labels_cmd(
    incident: Optional[int] = typer.Argument(None, help="show every label of this incident, oldest first"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object per label, one per line"),
) -> None:
    """Operators' corrections of incident causes: the newest per incident, or one incident's history."""
    from pitstop.cli.cmd_records import _store
    from pitstop.store import labels

    _, store = _store()
    rows = labels.label_history(store, incident) if incident is not None else labels.latest_labels(store)
    store.dispose()
    if as_json:
        for r in rows:
            typer.echo(json.dumps(r.model_dump(mode="json", exclude={"excerpt", "kernel_excerpt"})))
        return
    if not rows:
        typer.echo("No labels yet (`pitstop label INCIDENT CAUSE` adds one).")
        return
    for r in rows:
        note = f"  ({r.note})" if r.note else ""
        typer.echo(f"incident {r.incident_id}: {r.predicted_cause} -> {r.cause.value} by {r.labelled_by} "
                   f"at {r.labelled_at:%Y-%m-%d %H:%M}Z{note}")


def labelled_examples(store) -> list:
    """The newest label of each incident as a scoring example (classifiers.evaluate.Example)."""
    from classifiers.evaluate import Example
    from pitstop.store import labels

    return [
        Example(id=f"incident {r.incident_id}", label=r.cause, text=r.excerpt, kernel=r.kernel_excerpt, facts=r.facts)
        for r in labels.latest_labels(store)
    ]


def register(app: typer.Typer) -> None:
    app.command("label", help=LABEL_HELP)(label)
    app.command("labels")(labels_cmd)
