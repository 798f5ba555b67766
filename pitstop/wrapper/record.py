"""The `Run` row: written when the child starts, completed when it ends.

A database that is locked, corrupt or unreachable must not cost the run: every method returns an
error message instead of raising, and the run directory remains the record of truth.
"""

from __future__ import annotations

from datetime import datetime

from pitstop.models import Verdict
from pitstop.wrapper.attachments import AttachmentPlan
from pitstop.wrapper.outcome import RunOutcome, RunStatus


class RunRecorder:
    def __init__(self, url: str) -> None:
        self.url = url
        self._store = None

    def _open(self):
        if self._store is None:
            from pitstop.store import Store

            self._store = Store(self.url)
        return self._store

    def start(self, metadata: dict, started_at: datetime, run_dir: str) -> str | None:
        from pitstop.store.tables import Run

        try:
            with self._open().session() as session:
                session.add(
                    Run(
                        id=metadata["id"],
                        name=metadata.get("name"),
                        command=metadata["command"],
                        cwd=metadata["cwd"],
                        host=metadata["host"],
                        user=metadata["user"],
                        slurm_job_id=metadata.get("slurm_job_id"),
                        run_dir=run_dir,
                        started_at=started_at,
                        status=RunStatus.RUNNING.value,
                    )
                )
                session.commit()
        except Exception as exc:
            return self._problem(exc)
        return None

    def finish(
        self,
        outcome: RunOutcome,
        verdict: Verdict,
        plan: AttachmentPlan,
        notify_status: str,
    ) -> str | None:
        from pitstop.store.tables import Run

        try:
            with self._open().session() as session:
                row = session.get(Run, outcome.run_id)
                if row is None:  # the start write failed; write the whole row now
                    row = Run(
                        id=outcome.run_id,
                        command=outcome.command,
                        cwd=outcome.cwd,
                        host=outcome.host,
                        user=outcome.user,
                        run_dir=str(outcome.run_dir),
                        started_at=outcome.started_at,
                    )
                row.name = outcome.name
                row.slurm_job_id = outcome.slurm_job_id
                row.ended_at = outcome.ended_at
                row.exit_code = outcome.exit_code
                row.signal = outcome.signal
                row.status = outcome.status(verdict).value
                row.cause = verdict.cause.value
                row.signature = verdict.signature
                row.confidence = verdict.confidence
                row.evidence = [e.model_dump() for e in verdict.evidence]
                row.notify_status = notify_status
                row.attachments_skipped = [s.model_dump() for s in plan.skipped]
                row.error = outcome.launch_error or ("; ".join(outcome.warnings) or None)
                session.add(row)
                session.commit()
        except Exception as exc:
            return self._problem(exc)
        finally:
            self.close()
        return None

    def close(self) -> None:
        if self._store is not None:
            try:
                self._store.dispose()
            except Exception:
                pass
            self._store = None

    def _problem(self, exc: Exception) -> str:
        self.close()
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"could not record the run in the database {_safe(self.url)}: {text[:300]}"


def _safe(url: str) -> str:
    from pitstop.notify import redact

    return redact(url)
