"""The notification text for a finished run. Pure: everything it shows is passed in."""

from __future__ import annotations

import shlex

from pitstop.models import Verdict
from pitstop.notify import Notification
from pitstop.wrapper.attachments import AttachmentPlan
from pitstop.wrapper.excerpt import human_bytes, printable
from pitstop.wrapper.outcome import RunOutcome, RunStatus

SUBJECT_COMMAND_CHARS = 100


def command_text(command: list[str]) -> str:
    return printable(shlex.join(command), limit=2000)


def duration_text(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def exit_text(outcome: RunOutcome) -> str:
    if outcome.launch_error:
        return f"{outcome.exit_code} (never started: {outcome.launch_error})"
    if outcome.signal_name:
        return f"{outcome.exit_code} (killed by {outcome.signal_name})"
    return str(outcome.exit_code)


def subject(outcome: RunOutcome, verdict: Verdict) -> str:
    status = outcome.status(verdict)
    label = {RunStatus.NOT_STARTED: "NOT STARTED"}.get(status, status.value.upper())
    cmd = command_text(outcome.command)
    if len(cmd) > SUBJECT_COMMAND_CHARS:
        cmd = cmd[: SUBJECT_COMMAND_CHARS - 1] + "…"
    who = f"{outcome.name}: " if outcome.name else ""
    return f"[pitstop] {label} {verdict.cause.value} (exit {outcome.exit_code}) {who}{cmd} on {outcome.host}"


def body(
    outcome: RunOutcome,
    verdict: Verdict,
    plan: AttachmentPlan,
    stderr_tail: list[str],
    log_sizes: dict[str, int],
) -> str:
    status = outcome.status(verdict)
    lines = [
        f"Run {outcome.run_id}{f' ({outcome.name})' if outcome.name else ''}: {status.value.upper()}",
        f"Cause:     {verdict.cause.value} (signature {verdict.signature}, confidence {verdict.confidence:.2f})",
    ]
    if verdict.hint:
        lines.append(f"Hint:      {printable(verdict.hint)}")
    lines += [
        "",
        f"Command:   {command_text(outcome.command)}",
        f"Host:      {outcome.host}   User: {outcome.user}"
        + (f"   Slurm job: {outcome.slurm_job_id}" if outcome.slurm_job_id else ""),
        f"Directory: {printable(outcome.cwd)}",
        f"Started:   {outcome.started_at.isoformat(timespec='seconds')}   "
        f"Duration: {duration_text(outcome.duration_s)}",
        f"Exit code: {exit_text(outcome)}",
    ]
    if outcome.signals_forwarded:
        lines.append(f"Signals:   the wrapper received and forwarded {', '.join(outcome.signals_forwarded)}")
    lines += ["", "Evidence:"]
    if verdict.evidence:
        for ev in verdict.evidence:
            where = f"{ev.source}:{ev.line}" if ev.line else ev.source
            lines.append(f"  {printable(where, 200)}: {printable(ev.text)}")
    else:
        lines.append("  (no evidence line: the verdict rests on the exit status alone)")
    if stderr_tail:
        lines += ["", f"Last {len(stderr_tail)} lines of stderr:"]
        lines += [f"  | {line}" for line in stderr_tail]
    lines += ["", f"Logs:      {outcome.run_dir}"]
    for name, size in log_sizes.items():
        lines.append(f"           {name} ({human_bytes(size)})")
    if plan.attached:
        lines += ["", "Attached:"]
        for att in plan.attached:
            lines.append(f"  - {att.name} ({human_bytes(att.size)})" + (f": {att.note}" if att.note else ""))
    if plan.skipped:
        lines += ["", "Not attached (still on disk):"]
        for sk in plan.skipped:
            size = f" ({human_bytes(sk.size)})" if sk.size is not None else ""
            lines.append(f"  - {sk.name}{size}: {sk.reason}")
    if plan.notes:
        lines += ["", "Notes:"] + [f"  - {note}" for note in plan.notes]
    if outcome.warnings:
        lines += ["", "Wrapper warnings:"] + [f"  - {printable(w)}" for w in outcome.warnings]
    return "\n".join(lines) + "\n"


def build_notification(
    outcome: RunOutcome,
    verdict: Verdict,
    plan: AttachmentPlan,
    stderr_tail: list[str],
    log_sizes: dict[str, int],
) -> Notification:
    return Notification(
        subject=subject(outcome, verdict),
        body=body(outcome, verdict, plan, stderr_tail, log_sizes),
        attachments=plan.paths,
    )
