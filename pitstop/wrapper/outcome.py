"""What one wrapped run came to: the typed record passed between the finishing steps."""

from __future__ import annotations

import signal as _signal
from datetime import datetime
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, Field

from pitstop.models import Verdict


class RunStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # also a run that exited 0 while its log shows it failed (NaN loss)
    NOT_STARTED = "not_started"
    WRAPPER_KILLED = "wrapper_killed"  # the wrapper died (kill -9, OOM killer) before it recorded the end


class RunOutcome(BaseModel):
    run_id: str
    name: str | None = None
    run_dir: Path
    command: list[str]
    cwd: str
    host: str
    user: str
    slurm_job_id: str | None = None
    started_at: datetime
    ended_at: datetime
    exit_code: int
    signal: int | None = Field(default=None, description="the signal that killed the child")
    launch_error: str | None = Field(default=None, description="why the command never started")
    signals_forwarded: list[str] = Field(default_factory=list)
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    warnings: list[str] = Field(default_factory=list)

    @property
    def duration_s(self) -> float:
        return max(0.0, (self.ended_at - self.started_at).total_seconds())

    @property
    def signal_name(self) -> str | None:
        if self.signal is None:
            return None
        try:
            return _signal.Signals(self.signal).name
        except ValueError:
            return f"signal {self.signal}"

    def status(self, verdict: Verdict | None) -> RunStatus:
        if self.launch_error is not None:
            return RunStatus.NOT_STARTED
        if self.exit_code != 0 or (verdict is not None and verdict.is_failure):
            return RunStatus.FAILED
        return RunStatus.SUCCEEDED
