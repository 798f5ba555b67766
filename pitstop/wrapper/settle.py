"""A wrapped run whose wrapper died before recording the end (kill -9, the OOM killer, a node
that rebooted): told apart from a live one, and settled from what is on disk.

metadata.json holds the wrapper's pid, its start time (clock ticks since boot) and the boot id,
written before the child started. On the host that ran it, a run still "running" whose wrapper
is not that very process any more was abandoned. Settling it classifies the logs it left
(stderr.log, stdout.log), writes verdict.json and result.json with status `wrapper_killed`, and
updates the Run row: `pitstop runs` then shows "wrapper killed" with a cause. Nobody is notified
(the notification URLs were the killed wrapper's arguments).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel

from pitstop import procid
from pitstop.models import Cause, Evidence, SchedulerFacts, Verdict
from pitstop.wrapper import rundir
from pitstop.wrapper.outcome import RunStatus

# Statuses of a run whose wrapper has not recorded an end ("finishing": the child ended, the
# wrapper died while classifying or notifying).
UNFINISHED = frozenset({RunStatus.RUNNING.value, "running?", "finishing"})

Classify = Callable[[Sequence[Path], SchedulerFacts, float], Verdict]


class Settled(BaseModel):
    run_id: str
    verdict: Verdict
    exit_code: int | None
    ended_at: datetime
    note: str


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def wrapper_alive(run_dir: Path, host: str | None = None) -> bool | None:
    """True/False: the wrapper of this run is (not) running; None: cannot tell (another host,
    or a run directory written before Pitstop recorded the wrapper's start time and boot)."""
    meta = _json(run_dir / rundir.METADATA)
    if meta.get("host") != (host or os.uname().nodename):
        return None
    return procid.still_running({"pid": meta.get("wrapper_pid"), "start_ticks": meta.get("wrapper_start_ticks"),
                                 "boot_id": meta.get("boot_id")})


def abandoned(run_dir: Path, status: str) -> bool:
    return status in UNFINISHED and wrapper_alive(run_dir) is False


def _last_write(run_dir: Path) -> datetime:
    times = []
    for name in (rundir.COMBINED_LOG, rundir.STDOUT_LOG, rundir.STDERR_LOG, rundir.METADATA):
        try:
            times.append((run_dir / name).stat().st_mtime)
        except OSError:
            pass
    return datetime.fromtimestamp(max(times) if times else 0, tz=timezone.utc)


def settle(run_dir: Path, classify: Classify, timeout_s: float, record: Callable[[Settled], str | None] | None = None) -> Settled:
    """Classify what the abandoned run left and record it as `wrapper_killed`."""
    meta = _json(run_dir / rundir.METADATA)
    partial = _json(run_dir / rundir.RESULT)  # "finishing": the exit status reached disk first
    exit_code = partial.get("exit_code") if partial.get("status") == "finishing" else None
    signal = partial.get("signal") if exit_code is not None else None
    pid = meta.get("wrapper_pid")
    note = (f"the pitstop wrapper (pid {pid}) was killed after the command ended with {exit_code}"
            if exit_code is not None else
            f"the pitstop wrapper (pid {pid}) was killed before the command ended; its exit status is unknown")
    facts = SchedulerFacts(exit_code=exit_code if signal is None else None, signal=signal,
                           reason=None if exit_code is not None else note)
    logs = [run_dir / name for name in rundir.CLASSIFIED_LOGS]
    try:
        verdict = classify(logs, facts, timeout_s)
    except Exception as exc:  # a verdict from the facts alone beats none
        verdict = Verdict(cause=Cause.UNKNOWN, signature="classifier-error", confidence=0.0,
                          evidence=[Evidence(line=0, text=f"classification failed: {exc}"[:400], source="wrapper")])
    ended = datetime.fromisoformat(partial["ended_at"].replace("Z", "+00:00")) if exit_code is not None and \
        isinstance(partial.get("ended_at"), str) else _last_write(run_dir)
    settled = Settled(run_id=str(meta.get("id") or run_dir.name), verdict=verdict, exit_code=exit_code,
                      ended_at=ended, note=note)
    warnings = [note + "; settled by `pitstop runs show` from the logs on disk, nobody was notified"]
    if record is not None:
        problem = record(settled)
        if problem:
            warnings.append(problem)
    rundir.write_json_durably(run_dir / rundir.VERDICT, verdict.model_dump(mode="json"))
    rundir.write_json_durably(run_dir / rundir.RESULT, {
        "id": settled.run_id, "status": RunStatus.WRAPPER_KILLED.value, "exit_code": exit_code,
        "signal": signal, "started_at": meta.get("started_at"), "ended_at": ended.isoformat(),
        "cause": verdict.cause.value, "signature": verdict.signature, "notify_status": "skipped",
        "note": note, "warnings": warnings,
    })
    return settled


def record_in_store(url: str, run_dir: Path) -> Callable[[Settled], str | None]:
    """Update the Run row of a settled run, or write it from metadata.json when the killed
    wrapper never did; a database problem is returned, not raised."""
    def record(settled: Settled) -> str | None:
        from pitstop.store import Store
        from pitstop.store.tables import Run

        try:
            store = Store(url)
            try:
                with store.session() as session:
                    row = session.get(Run, settled.run_id)
                    if row is None:
                        meta = _json(run_dir / rundir.METADATA)
                        started = datetime.fromisoformat(str(meta.get("started_at")).replace("Z", "+00:00"))
                        row = Run(id=settled.run_id, name=meta.get("name"), command=meta.get("command") or [],
                                  cwd=meta.get("cwd", ""), host=meta.get("host", ""), user=meta.get("user", ""),
                                  slurm_job_id=meta.get("slurm_job_id"), run_dir=str(run_dir), started_at=started)
                    row.status = RunStatus.WRAPPER_KILLED.value
                    row.ended_at, row.exit_code = settled.ended_at, settled.exit_code
                    row.cause, row.signature = settled.verdict.cause.value, settled.verdict.signature
                    row.confidence = settled.verdict.confidence
                    row.evidence = [e.model_dump() for e in settled.verdict.evidence]
                    row.notify_status, row.error = "skipped", settled.note
                    session.add(row)
                    session.commit()
            finally:
                store.dispose()
        except Exception as exc:
            return f"could not record the settled run in the database: {str(exc).splitlines()[0][:300]}"
        return None

    return record
