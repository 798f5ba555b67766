"""Send one notification through apprise within a hard time budget, and never raise.

apprise can hang on DNS or a silent SMTP server, and it imports a lot. So the send runs in a
child Python process (`python -m pitstop.notify`) that is killed at the deadline: the caller's
time, memory and exit code are safe whatever the notifier does. The outcome says, per URL and in
one line, what happened.

    outcome = send(Notification(subject=..., body=...), urls, timeout_s=10)
    if not outcome.ok: print(outcome.summary)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, Field

from pitstop.secrets import redact, scrub

__all__ = ["Notification", "NotifyOutcome", "NotifyStatus", "UrlOutcome", "redact", "send"]


class Notification(BaseModel):
    subject: str
    body: str
    attachments: list[Path] = Field(default_factory=list)


class NotifyStatus(StrEnum):
    SENT = "sent"
    PARTIAL = "partial"  # some URLs took it, some did not
    FAILED = "failed"
    SKIPPED = "skipped"  # nothing to send to


class UrlOutcome(BaseModel):
    url: str = Field(description="the URL with every secret masked (pitstop.secrets)")
    ok: bool
    detail: str = ""


class NotifyOutcome(BaseModel):
    status: NotifyStatus
    summary: str = Field(description="one line for a log or a warning")
    urls: list[UrlOutcome] = Field(default_factory=list)
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status in (NotifyStatus.SENT, NotifyStatus.SKIPPED)


def send(notification: Notification, urls: list[str], timeout_s: float) -> NotifyOutcome:
    """Deliver to every URL within `timeout_s` seconds in total. Never raises. The outcome has
    every secret of `urls` masked, so it can be written and printed anywhere."""
    started = time.monotonic()
    try:
        outcome = _send(notification, urls, timeout_s, started)
    except Exception as exc:  # the contract is "never raises": report instead
        outcome = NotifyOutcome(
            status=NotifyStatus.FAILED,
            summary=f"notification failed: {exc!r}",
            duration_s=time.monotonic() - started,
        )
    return _scrubbed(outcome, urls)


def _scrubbed(outcome: NotifyOutcome, urls: list[str]) -> NotifyOutcome:
    """The one place an outcome leaves this module: no URL secret in any of its text."""
    return outcome.model_copy(update={
        "summary": scrub(outcome.summary, urls),
        "urls": [u.model_copy(update={"url": scrub(redact(u.url), urls), "detail": scrub(u.detail, urls)})
                 for u in outcome.urls],
    })


def _send(notification: Notification, urls: list[str], timeout_s: float, started: float) -> NotifyOutcome:
    urls = [u.strip() for u in urls if u and u.strip()]
    if not urls:
        return NotifyOutcome(status=NotifyStatus.SKIPPED, summary="no notification URLs configured")
    missing = [str(p) for p in notification.attachments if not Path(p).is_file()]
    if missing:
        notification = notification.model_copy(
            update={"attachments": [p for p in notification.attachments if Path(p).is_file()]}
        )
    request = json.dumps({"notification": notification.model_dump(mode="json"), "urls": urls})
    proc = subprocess.Popen(
        [sys.executable, "-m", "pitstop.notify"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # so the deadline can kill anything apprise started
    )
    try:
        out, err = proc.communicate(request.encode(), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.communicate()
        return NotifyOutcome(
            status=NotifyStatus.FAILED,
            summary=f"notification timed out after {timeout_s:g}s (killed) sending to "
            + ", ".join(redact(u) for u in urls),
            urls=[UrlOutcome(url=redact(u), ok=False, detail="timed out") for u in urls],
            duration_s=time.monotonic() - started,
        )
    duration = time.monotonic() - started
    try:
        results = [UrlOutcome.model_validate(r) for r in json.loads(out)["urls"]]
    except (ValueError, KeyError, TypeError):
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        return NotifyOutcome(
            status=NotifyStatus.FAILED,
            summary=f"notifier process failed (exit {proc.returncode}): {tail[0][:300]}",
            duration_s=duration,
        )
    return _outcome(results, missing, duration)


def _outcome(results: list[UrlOutcome], missing: list[str], duration: float) -> NotifyOutcome:
    good = [r for r in results if r.ok]
    bad = [r for r in results if not r.ok]
    status = NotifyStatus.SENT if not bad else NotifyStatus.PARTIAL if good else NotifyStatus.FAILED
    if not bad:
        summary = f"sent to {len(good)} URL(s)"
    else:
        summary = "; ".join(f"{r.url}: {r.detail}" for r in bad)
        summary = f"not delivered to {len(bad)} of {len(results)} URL(s): {summary}"
    if missing:
        summary += f" (attachments gone before sending: {', '.join(missing)})"
    return NotifyOutcome(status=status, summary=summary, urls=results, duration_s=duration)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()


# --- the child process ---------------------------------------------------------------------


def _deliver(notification: Notification, url: str) -> UrlOutcome:
    import logging

    import apprise

    shown = redact(url)
    messages: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage()
            if record.levelno >= logging.WARNING or "Exception" in text or "rror" in text:
                messages.append(text.strip())

    handler = _Collect(level=logging.DEBUG)
    logger = logging.getLogger("apprise")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        app = apprise.Apprise()
        if not app.add(url):
            return UrlOutcome(url=shown, ok=False, detail="apprise does not accept this URL (check its syntax)")
        attach = None
        if notification.attachments:
            attach = apprise.AppriseAttachment()
            for path in notification.attachments:
                attach.add(str(path))
        ok = app.notify(
            title=notification.subject,
            body=notification.body,
            body_format=apprise.NotifyFormat.TEXT,  # keep line breaks and evidence verbatim
            attach=attach,
        )
        detail = "" if ok else (" / ".join(dict.fromkeys(messages))[:500] or "apprise reported failure")
        return UrlOutcome(url=shown, ok=bool(ok), detail=scrub(detail, [url]))
    except Exception as exc:
        return UrlOutcome(url=shown, ok=False, detail=scrub(f"{type(exc).__name__}: {exc}", [url])[:500])
    finally:
        logger.removeHandler(handler)


def _worker() -> int:
    request = json.loads(sys.stdin.buffer.read())
    notification = Notification.model_validate(request["notification"])
    results = [_deliver(notification, url).model_dump() for url in request["urls"]]
    sys.stdout.write(json.dumps({"urls": results}))
    return 0


if __name__ == "__main__":
    sys.exit(_worker())
