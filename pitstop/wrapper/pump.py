"""Copy the child's stdout and stderr to the terminal, their raw logs and the tagged combined log.

One thread serves both pipes (poll), so combined.log interleaves them in the order they were
read, with no lock. combined.log has one line per output line:

    2026-12-02T15:04:05.123Z O| text        (E| for stderr; O+ / E+ continues a split line)

Throughput is the point: each chunk (up to 1 MiB) is tagged with ONE bytes.replace and written
with writev, no per-line Python work and no buffering. A line is written as it arrives; when the
other stream interrupts it, or it grows past `line_cap`, combined.log ends it there and its rest
continues on a `+` line. Memory is one chunk per read, whatever the volume or line length.

Bytes are never decoded: non-UTF-8 or binary output cannot break the pump. Writes are unbuffered
os.write/writev calls, so what the child printed is on disk even if the wrapper is SIGKILLed.
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
POLL_MS = 250  # how often a stop request is noticed while the pipes are quiet


class Sink:
    """One output fd. A failing sink (disk full, closed terminal) is dropped, never fatal."""

    def __init__(self, fd: int | None, label: str) -> None:
        self.fd = fd
        self.label = label
        self.error: str | None = None

    def write(self, *parts: bytes | memoryview) -> None:
        if self.fd is None:
            return
        views = [memoryview(p) for p in parts if len(p)]
        while views:
            try:
                n = os.writev(self.fd, views) if len(views) > 1 else os.write(self.fd, views[0])
            except BlockingIOError:  # an inherited non-blocking terminal: wait until writable
                select.select([], [self.fd], [], 1.0)
                continue
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                self.error = f"{self.label}: {exc.strerror or exc}"
                self.fd = None
                return
            while views and n >= len(views[0]):  # drop what was written, keep the rest
                n -= len(views[0])
                views.pop(0)
            if views and n:
                views[0] = views[0][n:]


class _Stamp:
    """The timestamp prefix; strftime only once per second."""

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


class Stream:
    """One child pipe and where its bytes go."""

    def __init__(self, fd: int, tag: bytes, terminal_fd: int | None, raw_fd: int | None) -> None:
        self.fd = fd
        self.tag = tag
        self.terminal = Sink(terminal_fd, "terminal")
        self.raw = Sink(raw_fd, f"{'stdout' if tag == b'O' else 'stderr'}.log")
        self.bytes_read = 0
        self.line_len = 0  # bytes of the current, unfinished line already in combined.log
        self.continues = False  # its next combined line continues one that was cut


class OutputPump(threading.Thread):
    def __init__(self, streams: list[Stream], combined_fd: int | None, line_cap: int = LINE_CAP) -> None:
        super().__init__(name="pitstop-pump", daemon=True)
        self.streams = streams
        self.combined = Sink(combined_fd, "combined.log")
        self.line_cap = line_cap
        self.error: str | None = None
        self._open: Stream | None = None  # the stream whose line is unfinished in combined.log
        self._stamp = _Stamp()
        self._stop_requested = threading.Event()

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # a pump must not die silently: say what broke
            self.error = f"output pump failed: {exc!r}"
        finally:
            self._end_open_line()
            for stream in self.streams:
                try:
                    os.close(stream.fd)
                except OSError:
                    pass

    def stop(self) -> None:
        """Stop after draining what is buffered now (a grandchild may hold the pipes open)."""
        self._stop_requested.set()

    def _loop(self) -> None:
        by_fd = {s.fd: s for s in self.streams}
        poller = select.poll()
        for fd in by_fd:
            poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        while by_fd:
            if self._stop_requested.is_set():
                self._drain(by_fd)
                return
            for fd, _event in poller.poll(POLL_MS):
                data = os.read(fd, CHUNK)
                if data:
                    self.feed(by_fd[fd], data)
                else:
                    poller.unregister(fd)
                    self._end_line_of(by_fd.pop(fd))

    def _drain(self, by_fd: dict[int, Stream]) -> None:
        deadline = time.monotonic() + 1.0
        for fd, stream in by_fd.items():
            os.set_blocking(fd, False)
            while time.monotonic() < deadline:
                try:
                    data = os.read(fd, CHUNK)
                except BlockingIOError:
                    break
                if not data:
                    break
                self.feed(stream, data)

    # --- one chunk -------------------------------------------------------------------------
    def feed(self, stream: Stream, data: bytes) -> None:
        stream.bytes_read += len(data)
        stream.terminal.write(data)
        stream.raw.write(data)
        if self.combined.fd is not None:
            self._tag(stream, data)

    def _tag(self, stream: Stream, data: bytes) -> None:
        if self._open is not None and self._open is not stream:
            self._end_line_of(self._open)  # the other stream interrupts an unfinished line
        stamp = self._stamp()
        if self._open is stream:
            head = b""
        else:
            head = stamp + stream.tag + (b"+ " if stream.continues else b"| ")
        last_nl = data.rfind(b"\n")
        if last_nl < 0:
            self.combined.write(head, data)
            self._open = stream
            stream.line_len += len(data)
            if stream.line_len >= self.line_cap:
                self._end_line_of(stream)
            return
        plain = stamp + stream.tag + b"| "
        # One C-level replace tags every line in the chunk.
        body = memoryview(data.replace(b"\n", b"\n" + plain))
        stream.continues = False
        tail = len(data) - last_nl - 1
        if tail == 0:
            self.combined.write(head, body[: len(body) - len(plain)])  # no prefix for a line not begun
            self._open = None
            stream.line_len = 0
        else:
            self.combined.write(head, body)
            self._open = stream
            stream.line_len = tail
            if tail >= self.line_cap:
                self._end_line_of(stream)

    def _end_line_of(self, stream: Stream) -> None:
        if self._open is stream:
            self.combined.write(b"\n")
            self._open = None
            stream.continues = True
            stream.line_len = 0

    def _end_open_line(self) -> None:
        if self._open is not None:
            self._end_line_of(self._open)

    @property
    def sink_errors(self) -> list[str]:
        errors = [self.combined.error, self.error]
        for s in self.streams:
            errors += [s.raw.error]  # a closed terminal is normal (`| head`), not worth a warning
        return [e for e in errors if e]
