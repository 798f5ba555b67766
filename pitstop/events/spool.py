"""The event spool: one JSON file per event under PITSTOP_HOME/spool, written atomically.

Layout:  spool/pending/<occurred>-<id>.json   waiting for delivery (oldest first by name)
         spool/sent/                          delivered, kept for audit (the newest N)
         spool/bad/                           unreadable or refused by the server, kept with
                                              a .why file next to each, never deleted
A file only ever appears complete in pending/ (tmp + fsync + rename + fsync of the directory),
so a crash or a full disk mid-write leaves at most a stray tmp file, never a half event.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from pitstop.events.models import WireEvent

MAX_EVENT_BYTES = 1024 * 1024  # a spool file larger than this is not one of ours


class SpoolError(OSError):
    """The spool directory cannot be written; the message names it."""


@dataclass(frozen=True)
class SpooledFile:
    path: Path
    event: WireEvent


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def spools_to_deliver(primary: Path) -> list["Spool"]:
    """The spool under PITSTOP_HOME and every fallback spool a hook had to use (fallback.py)."""
    from pitstop.events.fallback import fallback_spool_dirs

    return [Spool(primary), *(Spool(d) for d in fallback_spool_dirs() if d != primary)]


class Spool:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.pending = root / "pending"
        self.sent = root / "sent"
        self.bad = root / "bad"
        self.tmp = root / "tmp"

    def _ensure(self) -> None:
        try:
            for d in (self.pending, self.sent, self.bad, self.tmp):
                d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpoolError(f"cannot create the event spool under {self.root}: {exc}") from exc

    @staticmethod
    def file_name(event: WireEvent) -> str:
        stamp = event.occurred.strftime("%Y%m%dT%H%M%S%f")
        return f"{stamp}-{event.id}.json"

    def write(self, event: WireEvent) -> Path:
        """Durably add an event. Re-spooling the same event id replaces the file, not duplicates it."""
        self._ensure()
        # the same event spooled again (a re-run hook) keeps its first file and place in line
        existing = sorted(self.pending.glob(f"*-{event.id}.json"))
        final = existing[0] if existing else self.pending / self.file_name(event)
        tmp = self.tmp / f"{final.name}.{os.getpid()}.tmp"
        data = event.model_dump_json().encode("utf-8")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, final)
            _fsync_dir(self.pending)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise SpoolError(f"cannot write event {event.id} to {self.pending}: {exc}") from exc
        return final

    def pending_paths(self) -> list[Path]:
        if not self.pending.is_dir():
            return []
        return sorted(p for p in self.pending.iterdir() if p.suffix == ".json" and p.is_file())

    def strays(self) -> list[Path]:
        """Entries in pending/ that are not event files (a directory named x.json, a dangling
        symlink, a stray name): never delivered, never counted, shown so a human can look."""
        if not self.pending.is_dir():
            return []
        return sorted(p for p in self.pending.iterdir() if not (p.suffix == ".json" and p.is_file()))

    def read(self, path: Path) -> WireEvent:
        """Parse one spool file. Raises ValueError (with the reason) for a file we cannot use."""
        size = path.stat().st_size
        if size > MAX_EVENT_BYTES:
            raise ValueError(f"{size} bytes, larger than any Pitstop event ({MAX_EVENT_BYTES})")
        if size == 0:
            raise ValueError("empty file")
        try:
            return WireEvent.model_validate_json(path.read_bytes())
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "file"
            raise ValueError(f"not a Pitstop event ({where}: {first['msg']})") from None

    def iter_pending(self) -> Iterator[SpooledFile]:
        """Readable pending events, oldest first; unreadable ones are moved to bad/ on the way."""
        for path in self.pending_paths():
            try:
                yield SpooledFile(path, self.read(path))
            except FileNotFoundError:
                continue  # another deliverer took it
            except (OSError, ValueError) as exc:
                self.quarantine(path, str(exc))

    def mark_sent(self, path: Path, keep: int) -> None:
        self._ensure()
        with contextlib.suppress(FileNotFoundError):
            if keep > 0:
                os.replace(path, self.sent / path.name)
            else:
                path.unlink()
        self._prune_sent(keep)

    def quarantine(self, path: Path, why: str) -> None:
        self._ensure()
        with contextlib.suppress(FileNotFoundError):
            os.replace(path, self.bad / path.name)
            (self.bad / f"{path.name}.why").write_text(why + "\n", encoding="utf-8")

    def _prune_sent(self, keep: int) -> None:
        files = sorted(self.sent.glob("*.json"))
        for old in files[: max(0, len(files) - keep)]:
            with contextlib.suppress(OSError):
                old.unlink()

    def counts(self) -> dict[str, int]:
        """Event files only: what `pending_paths` would deliver, not every name ending in .json."""
        def n(d: Path) -> int:
            return sum(1 for p in d.glob("*.json") if p.is_file()) if d.is_dir() else 0

        return {"pending": n(self.pending), "sent": n(self.sent), "bad": n(self.bad)}

    @contextlib.contextmanager
    def delivery_lock(self, wait: bool) -> Iterator[bool]:
        """One deliverer at a time. Yields False (without waiting) when another holds it."""
        self._ensure()
        fd = os.open(self.root / ".deliver.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)  # closing releases the lock
