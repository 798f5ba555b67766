"""Classify whole logs in a separate process, within a time budget.

The classifier reads every byte of the logs (a fatal Xid on line 1 of a 2 GB log still counts),
so it runs in its own process: the wrapper's memory stays small whatever the log size, and a
slow or stuck scan is killed at the deadline instead of holding the job's exit forever.

Protocol (one JSON object per line on the worker's stdout):
  {"stage": "facts", "verdict": {...}}   the verdict from the exit status alone, sent first
  {"stage": "full",  "verdict": {...}}   the verdict over the complete logs
  {"stage": "error", "error": "..."}     a log could not be read; the message names it
On timeout the "facts" verdict (if it arrived) is what the run gets, marked as such.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

from pitstop.models import Evidence, SchedulerFacts, Verdict


class ClassifierFailed(RuntimeError):
    """The classifier process could not give a verdict; the message says why."""


class ClassifierTimedOut(ClassifierFailed):
    """The budget ran out. `fallback` is the exit-status-only verdict, when the worker sent it."""

    def __init__(self, message: str, fallback: Verdict | None) -> None:
        super().__init__(message)
        self.fallback = fallback


def request_json(paths: Sequence[Path], facts: SchedulerFacts) -> bytes:
    return json.dumps({"paths": [str(p) for p in paths], "facts": facts.model_dump(mode="json")}).encode()


class ClassifierProcess:
    """A worker started while the job runs (its imports and rule compilation take ~1 s), then
    given the logs once the job has ended. Callable as the wrapper's `Classify`.

    With `follow`, the worker scans those logs while the job writes them (pitstop/wrapper/
    follow.py); calling it with the same paths once they are closed finishes that scan.
    """

    def __init__(self, argv: Sequence[str], follow: Sequence[Path] | None = None) -> None:
        self.argv = list(argv)
        try:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True,  # its own group: a timeout kills it and anything it started
            )
        except OSError as exc:
            raise ClassifierFailed(
                f"cannot start the classifier ({self.argv[0]}): {exc.strerror or exc}"
            ) from None
        self.replies: list[dict] = []
        self.errors = bytearray()
        self._readers = [
            threading.Thread(target=_read_replies, args=(self.proc.stdout, self.replies), daemon=True),
            threading.Thread(target=_read_bounded, args=(self.proc.stderr, self.errors), daemon=True),
        ]
        for reader in self._readers:
            reader.start()
        if follow:
            try:
                self.proc.stdin.write(json.dumps({"follow": [str(p) for p in follow]}).encode() + b"\n")
                self.proc.stdin.flush()
            except OSError:
                pass  # it died already: the verdict request will say so

    def __call__(self, paths: Sequence[Path], facts: SchedulerFacts, timeout_s: float) -> Verdict:
        """The verdict over the complete `paths`, within `timeout_s` from now."""
        proc = self.proc
        try:
            proc.stdin.write(request_json(paths, facts) + b"\n")
            proc.stdin.close()
        except OSError:
            pass  # it died already; its exit status and stderr say why
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.close()
            raise ClassifierTimedOut(
                f"classifier timed out after {timeout_s:g} s on {_total_size(paths)} of logs",
                _stage(self.replies, "facts"),
            ) from None
        for reader in self._readers:
            reader.join(5.0)
        full = _stage(self.replies, "full")
        if full is not None:
            return full
        for reply in self.replies:
            if reply.get("stage") == "error":
                raise ClassifierFailed(str(reply.get("error"))[:400])
        tail = self.errors.decode("utf-8", "replace").strip().splitlines()[-3:]
        raise ClassifierFailed(
            f"classifier exited {proc.returncode} without a verdict" + (f": {' / '.join(tail)}" if tail else "")
        )

    def close(self) -> None:
        """Stop the worker if it still runs (a launch failure, a timeout, the wrapper finishing)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                self.proc.wait(5.0)
            except subprocess.TimeoutExpired:
                pass
        for reader in self._readers:
            reader.join(2.0)


def classify_in_child(
    argv: Sequence[str], paths: Sequence[Path], facts: SchedulerFacts, timeout_s: float
) -> Verdict:
    """Start the worker `argv` and classify `paths` with it, in one go."""
    worker = ClassifierProcess(argv)
    try:
        return worker(paths, facts, timeout_s)
    finally:
        worker.close()


def with_timeout_note(fallback: Verdict | None, exit_code: int, message: str) -> Verdict:
    """The verdict a run gets when the classifier ran out of time: from the exit status alone."""
    note = Evidence(line=0, text=f"{message}; verdict from the exit status alone", source="wrapper")
    if fallback is not None:
        return fallback.model_copy(update={"evidence": [*fallback.evidence, note]})
    from pitstop.models import Cause

    return Verdict(
        cause=Cause.SUCCESS if exit_code == 0 else Cause.UNKNOWN,
        signature="classifier-timeout",
        confidence=0.0,
        evidence=[note],
        hint="the classifier timed out: read the log, or raise wrapper.classify_timeout_s",
    )


def _read_replies(pipe, replies: list[dict]) -> None:
    for line in pipe:
        if len(line) > 4 << 20:  # a verdict is a few kB; anything this size is not one
            continue
        try:
            reply = json.loads(line)
        except ValueError:
            continue
        if isinstance(reply, dict):
            replies.append(reply)


def _read_bounded(pipe, sink: bytearray, limit: int = 64 * 1024) -> None:
    while chunk := pipe.read(64 * 1024):
        sink += chunk
        if len(sink) > limit:
            del sink[: len(sink) - limit]


def _stage(replies: list[dict], stage: str) -> Verdict | None:
    for reply in replies:
        if reply.get("stage") == stage:
            try:
                return Verdict.model_validate(reply.get("verdict"))
            except ValueError:
                return None
    return None


def _total_size(paths: Sequence[Path]) -> str:
    from pitstop.wrapper.excerpt import human_bytes

    total = 0
    for path in paths:
        try:
            total += os.stat(path).st_size
        except OSError:
            pass
    return human_bytes(total)
