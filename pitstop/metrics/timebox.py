"""Run a source's read in a worker thread and wait for it at most a deadline.

A scrape must answer even when slurmctld hangs or the database is locked. At most one read per
source is in flight: a scrape that finds the previous read still running waits on that one
instead of starting another, so a hung source costs one thread, not one per scrape.
"""

from __future__ import annotations

import threading
import time

from pydantic import BaseModel, Field

from pitstop.metrics.samples import Reading, Source


class SourceResult(BaseModel):
    source: str
    ok: bool
    samples: Reading = Field(default_factory=list)
    error: str = ""
    seconds: float = 0.0


class _Call:
    def __init__(self, source: Source) -> None:
        self.started = time.monotonic()
        self.done = threading.Event()
        self.samples: Reading = []
        self.error = ""
        self.seconds = 0.0
        self._thread = threading.Thread(target=self._run, args=(source,), daemon=True,
                                        name=f"pitstop-metrics-{source.name}")
        self._thread.start()

    def _run(self, source: Source) -> None:
        try:
            self.samples = source.read()
        except Exception as exc:  # a source's failure is its `up` gauge, never a failed scrape
            self.error = f"{type(exc).__name__}: {exc}"[:500]
        finally:
            self.seconds = time.monotonic() - self.started
            self.done.set()


class TimeBoxed:
    """Wraps one source; `start` then `result` (or `read` for both)."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self._lock = threading.Lock()
        self._call: _Call | None = None

    @property
    def name(self) -> str:
        return self.source.name

    def start(self) -> _Call:
        with self._lock:
            if self._call is None or self._call.done.is_set():
                self._call = _Call(self.source)
            return self._call

    def result(self, call: _Call, deadline: float) -> SourceResult:
        if not call.done.wait(max(0.0, deadline - time.monotonic())):
            running = time.monotonic() - call.started
            return SourceResult(source=self.name, ok=False, seconds=running,
                                error=f"no answer after {running:.1f} s (still waiting for it)")
        if call.error:
            return SourceResult(source=self.name, ok=False, error=call.error, seconds=call.seconds)
        return SourceResult(source=self.name, ok=True, samples=call.samples, seconds=call.seconds)

    def read(self, timeout_s: float) -> SourceResult:
        return self.result(self.start(), time.monotonic() + timeout_s)
