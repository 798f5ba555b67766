"""Copy one child pipe to the terminal, its raw log and the tagged combined log.

Memory is bounded whatever the volume: reads are fixed-size chunks, and the only buffer is the
unfinished last line, capped at `line_cap` (a longer line is split and its pieces marked `+`).
Raw logs get the bytes exactly as read; combined.log gets one line per output line:

    2026-12-02T15:04:05.123Z O| text        (E| for stderr; O+ / E+ continues a split line)

Bytes are never decoded, so non-UTF-8 or binary output cannot break the pump. Every write is an
unbuffered os.write: what the child printed is in the page cache even if the wrapper is killed.
Standard library only.
"""

from __future__ import annotations

import errno
import os
import select
import threading
import time

CHUNK = 1 << 20
LINE_CAP = 64 * 1024
IDLE_FLUSH_S = 0.25  # an unfinished line (a prompt, a progress bar) reaches combined.log soon


class _Sink:
    """One output fd. A failing sink (disk full, closed terminal) is dropped, never fatal."""

    def __init__(self, fd: int | None, label: str) -> None:
        self.fd = fd
        self.label = label
        self.error: str | None = None

    def write(self, data: bytes | memoryview) -> None:
        if self.fd is None or not data:
            return
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.fd, view)
            except BlockingIOError:  # an inherited non-blocking terminal: wait until writable
                select.select([], [self.fd], [], 1.0)
                continue
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                self.error = f"{self.label}: {exc.strerror or exc}"
                self.fd = None
                return
            view = view[n:]


class _Stamp:
    """The per-chunk timestamp prefix; strftime only once per second."""

    def __init__(self) -> None:
        self._sec = -1
        self._text = ""

    def __call__(self) -> bytes:
        now = time.time()
        sec = int(now)
        if sec != self._sec:
            self._sec = sec
            self._text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        return f"{self._text}.{int(now * 1000) % 1000:03d}Z ".encode()


class StreamPump(threading.Thread):
    def __init__(
        self,
        src_fd: int,
        tag: bytes,
        terminal_fd: int | None,
        raw_fd: int | None,
        combined_fd: int | None,
        line_cap: int = LINE_CAP,
    ) -> None:
        super().__init__(name=f"pitstop-pump-{tag.decode()}", daemon=True)
        self.src_fd = src_fd
        self.tag = tag
        self.terminal = _Sink(terminal_fd, "terminal")
        self.raw = _Sink(raw_fd, "raw log")
        self.combined = _Sink(combined_fd, "combined.log")
        self.line_cap = line_cap
        self.bytes_read = 0
        self.error: str | None = None
        self._pending = bytearray()
        self._continues = False  # the next combined line continues a split one
        self._stamp = _Stamp()
        self._stop_requested = threading.Event()

    # --- thread body -----------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # a pump must not die silently: say what broke
            self.error = f"output pump {self.tag.decode()} failed: {exc!r}"
        finally:
            self._flush_partial()
            try:
                os.close(self.src_fd)
            except OSError:
                pass

    def stop(self) -> None:
        """Stop after draining what is buffered now (a grandchild may hold the pipe open)."""
        self._stop_requested.set()

    def _loop(self) -> None:
        poller = select.poll()
        poller.register(self.src_fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        while True:
            if self._stop_requested.is_set():
                self._drain_nonblocking()
                return
            if not poller.poll(IDLE_FLUSH_S * 1000):
                self._flush_partial()
                continue
            data = os.read(self.src_fd, CHUNK)
            if not data:
                return
            self._feed(data)

    def _drain_nonblocking(self) -> None:
        os.set_blocking(self.src_fd, False)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            try:
                data = os.read(self.src_fd, CHUNK)
            except BlockingIOError:
                return
            if not data:
                return
            self._feed(data)

    # --- one chunk -------------------------------------------------------------------------
    def _feed(self, data: bytes) -> None:
        self.bytes_read += len(data)
        self.terminal.write(data)
        self.raw.write(data)
        if self.combined.fd is not None:
            self._tag_lines(data)

    def _prefix(self, stamp: bytes, continues: bool) -> bytes:
        return stamp + self.tag + (b"+ " if continues else b"| ")

    def _tag_lines(self, data: bytes) -> None:
        last_nl = data.rfind(b"\n")
        if last_nl < 0:
            self._pending += data
            if len(self._pending) >= self.line_cap:
                self._flush_partial()
            return
        stamp = self._stamp()
        whole, rest = data[: last_nl + 1], data[last_nl + 1 :]
        if self._pending:
            first_nl = whole.find(b"\n")
            first = self._prefix(stamp, self._continues) + bytes(self._pending) + whole[: first_nl + 1]
            self._pending.clear()
            whole = whole[first_nl + 1 :]
        else:
            first = b""
            if self._continues:  # the first line of this chunk finishes a split one
                first_nl = whole.find(b"\n")
                first = self._prefix(stamp, True) + whole[: first_nl + 1]
                whole = whole[first_nl + 1 :]
        self._continues = False
        if whole:
            plain = self._prefix(stamp, False)
            # One C-level replace tags every line in the chunk: no per-line Python work.
            body = plain + whole[:-1].replace(b"\n", b"\n" + plain) + b"\n"
            self.combined.write(first + body if first else body)
        elif first:
            self.combined.write(first)
        if rest:
            self._pending += rest
            if len(self._pending) >= self.line_cap:
                self._flush_partial()

    def _flush_partial(self) -> None:
        if not self._pending or self.combined.fd is None:
            self._pending.clear()
            return
        self.combined.write(self._prefix(self._stamp(), self._continues) + bytes(self._pending) + b"\n")
        self._pending.clear()
        self._continues = True

    @property
    def sink_errors(self) -> list[str]:
        return [e for e in (self.terminal.error, self.raw.error, self.combined.error, self.error) if e]
