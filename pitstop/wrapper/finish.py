"""After the child ends: classify, choose attachments, notify, record. Each step is fenced.

A failure in any step becomes a warning in the run record; it never changes the exit code and
never removes what is on disk.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from pitstop.config import Settings
from pitstop.models import Cause, Evidence, SchedulerFacts, Verdict
from pitstop.notify import NotifyOutcome, NotifyStatus, send
from pitstop.wrapper import rundir
from pitstop.wrapper.attachments import AttachmentPlan, plan_attachments
from pitstop.wrapper.classify_child import ClassifierTimedOut, with_timeout_note
from pitstop.wrapper.excerpt import tail_lines
from pitstop.wrapper.exitstatus import NOT_FOUND
from pitstop.wrapper.outcome import RunOutcome
from pitstop.wrapper.record import RunRecorder
from pitstop.wrapper.report import build_notification

# (log paths, scheduler facts, time budget in s) -> the verdict over the complete logs
Classify = Callable[[Sequence[Path], SchedulerFacts, float], Verdict]

# What the wrapper itself knows when a command never started: no log to classify.
_NOT_STARTED = {
    NOT_FOUND: ("command-not-found", "check the command name, PATH and the job's modules/venv"),
}
_NOT_EXECUTABLE = ("command-not-executable", "check the file's execute bit and its #! line")


class RunReport(BaseModel):
    outcome: RunOutcome
    verdict: Verdict
    plan: AttachmentPlan = Field(default_factory=AttachmentPlan)
    notify: NotifyOutcome
    warnings: list[str] = Field(default_factory=list)
    classify_s: float = Field(default=0.0, description="time spent classifying the complete logs")


def not_started_verdict(outcome: RunOutcome) -> Verdict:
    signature, hint = _NOT_STARTED.get(outcome.exit_code, _NOT_EXECUTABLE)
    return Verdict(
        cause=Cause.ENVIRONMENT,
        signature=signature,
        confidence=1.0,
        evidence=[Evidence(line=0, text=outcome.launch_error or "", source="wrapper")],
        hint=hint,
    )


def classify_run(
    outcome: RunOutcome, classify: Classify | None, settings: Settings
) -> tuple[Verdict, str | None]:
    if outcome.launch_error is not None:
        return not_started_verdict(outcome), None
    facts = SchedulerFacts(
        exit_code=outcome.exit_code if outcome.signal is None else None,
        signal=outcome.signal,
        reason=(
            f"the wrapper received {', '.join(outcome.signals_forwarded)}"
            if outcome.signals_forwarded
            else None
        ),
    )
    logs = [outcome.run_dir / name for name in rundir.CLASSIFIED_LOGS]
    try:
        if classify is None:
            raise RuntimeError("no classifier is available")
        return classify(logs, facts, settings.wrapper.classify_timeout_s), None
    except ClassifierTimedOut as exc:
        return with_timeout_note(exc.fallback, outcome.exit_code, str(exc)), str(exc)
    except Exception as exc:
        fallback = Verdict(
            cause=Cause.SUCCESS if outcome.exit_code == 0 else Cause.UNKNOWN,
            signature="classifier-error",
            confidence=0.0,
            evidence=[Evidence(line=0, text=f"exit code {outcome.exit_code}", source="wrapper")],
        )
        return fallback, f"classification failed, cause left unknown: {exc}"[:400]


def should_notify(outcome: RunOutcome, verdict: Verdict, settings: Settings) -> bool:
    return outcome.status(verdict).value != "succeeded" or settings.notify.on_success


def finish_run(
    outcome: RunOutcome,
    settings: Settings,
    attach_globs: list[str],
    classify: Classify | None,
    recorder: RunRecorder | None,
) -> RunReport:
    warnings: list[str] = list(outcome.warnings)
    run_dir = outcome.run_dir

    started = time.monotonic()
    verdict, problem = classify_run(outcome, classify, settings)
    classify_s = time.monotonic() - started
    if problem:
        warnings.append(problem)
    _write(run_dir / rundir.VERDICT, verdict.model_dump(mode="json"), warnings)

    plan = AttachmentPlan()
    if not settings.notify.urls:
        notify = NotifyOutcome(status=NotifyStatus.SKIPPED, summary="no notification URLs configured")
    else:
        notify = NotifyOutcome(status=NotifyStatus.SKIPPED, summary="success notifications are off")
    if settings.notify.urls and should_notify(outcome, verdict, settings):
        try:
            plan = plan_attachments(
                run_dir / rundir.COMBINED_LOG,
                attach_globs,
                Path(outcome.cwd) if Path(outcome.cwd).is_dir() else run_dir,
                settings.wrapper,
                run_dir / rundir.ATTACH_DIR,
            )
        except Exception as exc:
            warnings.append(f"could not prepare attachments: {exc!r}"[:400])
        outcome_for_mail = outcome.model_copy(update={"warnings": warnings})
        notification = build_notification(
            outcome_for_mail,
            verdict,
            plan,
            tail_lines(run_dir / rundir.STDERR_LOG, settings.wrapper.stderr_tail_lines),
            _log_sizes(run_dir),
        )
        notify = send(notification, settings.notify.urls, settings.notify.timeout_s)
        record = notify.model_dump(mode="json")
        record["subject"] = notification.subject
        record["attached"] = [a.model_dump(mode="json") for a in plan.attached]
        record["skipped"] = [s.model_dump(mode="json") for s in plan.skipped]
        _write(run_dir / rundir.NOTIFY, record, warnings)
        if not notify.ok:
            warnings.append(f"notification {notify.status.value}: {notify.summary}")
    else:
        _write(run_dir / rundir.NOTIFY, notify.model_dump(mode="json"), warnings)

    notify_status = notify.status.value if notify.ok else f"{notify.status.value}: {notify.summary}"
    if recorder is not None:
        final = outcome.model_copy(update={"warnings": warnings})
        problem = recorder.finish(final, verdict, plan, notify_status[:1000])
        if problem:
            warnings.append(problem)
    report = RunReport(
        outcome=outcome.model_copy(update={"warnings": warnings}),
        verdict=verdict,
        plan=plan,
        notify=notify,
        warnings=warnings,
        classify_s=classify_s,
    )
    _write(run_dir / rundir.RESULT, result_record(report), [])
    return report


def result_record(report: RunReport) -> dict:
    o = report.outcome
    return {
        "id": o.run_id,
        "status": o.status(report.verdict).value,
        "exit_code": o.exit_code,
        "signal": o.signal,
        "launch_error": o.launch_error,
        "started_at": o.started_at.isoformat(),
        "ended_at": o.ended_at.isoformat(),
        "duration_s": round(o.duration_s, 3),
        "classify_s": round(report.classify_s, 3),
        "stdout_bytes": o.stdout_bytes,
        "stderr_bytes": o.stderr_bytes,
        "signals_forwarded": o.signals_forwarded,
        "cause": report.verdict.cause.value,
        "signature": report.verdict.signature,
        "notify_status": report.notify.status.value,
        "attachments_skipped": [s.model_dump(mode="json") for s in report.plan.skipped],
        "warnings": report.warnings,
    }


def _log_sizes(run_dir: Path) -> dict[str, int]:
    sizes = {}
    for name in (rundir.COMBINED_LOG, rundir.STDOUT_LOG, rundir.STDERR_LOG):
        try:
            sizes[name] = (run_dir / name).stat().st_size
        except OSError:
            pass
    return sizes


def _write(path: Path, obj: dict, warnings: list[str]) -> None:
    try:
        rundir.write_json_durably(path, obj)
    except OSError as exc:
        warnings.append(f"could not write {path}: {exc.strerror or exc}")
