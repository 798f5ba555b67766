"""Copy the child's stdout and stderr to the terminal, their raw logs and the tagged combined log.

combined.log has one line per output line:

    2026-12-02T15:04:05.123Z O| text        (E| for stderr; O+ / E+ continues a split line)

Two threads, because on a job that prints fast the page-cache writes of the two log copies are the
cost (the logs hold ~2.4x the bytes `tee` writes), and two threads write them on two cores:
  - the reader (`OutputPump`) polls both pipes, one thread, so combined.log interleaves them in
    the order they were read, and writes each chunk to the terminal and its raw log at once;
  - the combined writer (`CombinedWriter`) tags the chunks and appends them to combined.log.
    It trails the reader by at most a few chunks (`QUEUE_CHUNKS`): memory stays bounded.
Each chunk (up to 1 MiB) is tagged with ONE bytes.replace and written with writev: no per-line
Python work. A line is written as it arrives; when the other stream interrupts it, or it grows
past `line_cap`, combined.log ends it there and its rest continues on a `+` line. The timestamp is
when the chunk was read, whichever thread writes it.

Bytes are never decoded: non-UTF-8 or binary output cannot break the pump. Writes are unbuffered
os.write/writev calls, so what the child printed is in stdout.log/stderr.log even if the wrapper
is SIGKILLed (combined.log may then lack the last few chunks). Standard library only.
"""

from __future__ import annotations

import errno
import os
import queue
import select
import threading
import time

CHUNK = 1 << 20
LINE_CAP = 64 * 1024
POLL_MS = 250  # how often a stop request is noticed while the pipes are quiet
QUEUE_CHUNKS = 8  # how far combined.log may trail the raw logs, in chunks (<= 8 MiB)


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
    """The timestamp prefix for a read time; strftime only once per second."""

    def __init__(self) -> None:
        self._sec = -1
        self._text = ""

    def __call__(self, now: float) -> bytes:
        sec = int(now)
        if sec != self._sec:
            self._sec = sec
            self._text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        return f"{self._text}.{int(now * 1000) % 1000:03d}Z ".encode()


class _LineState:
    __slots__ = ("line_len", "continues")

    def __init__(self) -> None:
        self.line_len = 0  # bytes of the current, unfinished line already in combined.log
        self.continues = False  # its next combined line continues one that was cut


class CombinedLog:
    """Tags chunks from the two streams into combined.log lines. Not thread-safe: one writer."""

    def __init__(self, sink: Sink, line_cap: int = LINE_CAP) -> None:
        self.sink = sink
        self.line_cap = line_cap
        self._state = {b"O": _LineState(), b"E": _LineState()}
        self._open: bytes | None = None  # the stream whose line is unfinished in combined.log
        self._stamp = _Stamp()

    def add(self, tag: bytes, data: bytes, now: float) -> None:
        if self.sink.fd is None:
            return
        state = self._state[tag]
        if self._open is not None and self._open != tag:
            self._end_line_of(self._open)  # the other stream interrupts an unfinished line
        stamp = self._stamp(now)
        head = b"" if self._open == tag else stamp + tag + (b"+ " if state.continues else b"| ")
        last_nl = data.rfind(b"\n")
        if last_nl < 0:
            self.sink.write(head, data)
            self._open = tag
            state.line_len += len(data)
            if state.line_len >= self.line_cap:
                self._end_line_of(tag)
            return
        plain = stamp + tag + b"| "
        # One C-level replace tags every line in the chunk.
        body = memoryview(data.replace(b"\n", b"\n" + plain))
        state.continues = False
        tail = len(data) - last_nl - 1
        if tail == 0:
            self.sink.write(head, body[: len(body) - len(plain)])  # no prefix for a line not begun
            self._open = None
            state.line_len = 0
        else:
            self.sink.write(head, body)
            self._open = tag
            state.line_len = tail
            if tail >= self.line_cap:
                self._end_line_of(tag)

    def end_line_of(self, tag: bytes) -> None:
        """The stream ended: finish its open line, if it has one."""
        self._end_line_of(tag)

    def close(self) -> None:
        if self._open is not None:
            self._end_line_of(self._open)

    def _end_line_of(self, tag: bytes) -> None:
        if self._open == tag:
            self.sink.write(b"\n")
            self._open = None
            state = self._state[tag]
            state.continues = True
            state.line_len = 0


class CombinedWriter(threading.Thread):
    """Runs a CombinedLog on its own thread, fed through a short queue."""

    _END = object()

    def __init__(self, log: CombinedLog) -> None:
        super().__init__(name="pitstop-combined", daemon=True)
        self.log = log
        self.error: str | None = None
        self._queue: queue.Queue = queue.Queue(QUEUE_CHUNKS)

    def add(self, tag: bytes, data: bytes, now: float) -> None:
        if self.is_alive():  # a writer that died stops taking chunks; the raw logs go on
            self._queue.put((tag, data, now))

    def end_line_of(self, tag: bytes) -> None:
        if self.is_alive():
            self._queue.put((tag, None, 0.0))

    def finish(self, timeout_s: float = 10.0) -> None:
        if self.is_alive():
            self._queue.put(self._END)
            self.join(timeout_s)

    def run(self) -> None:
        try:
            while (item := self._queue.get()) is not self._END:
                tag, data, now = item
                if data is None:
                    self.log.end_line_of(tag)
                else:
                    self.log.add(tag, data, now)
            self.log.close()
        except BaseException as exc:  # say what broke; the raw logs are unaffected
            self.error = f"combined.log writer failed: {exc!r}"
            self._drain_forever()

    def _drain_forever(self) -> None:
        # Keep taking chunks so the reader never blocks on a full queue.
        while self._queue.get() is not self._END:
            pass


class Stream:
    """One child pipe and where its bytes go."""

    def __init__(self, fd: int, tag: bytes, terminal_fd: int | None, raw_fd: int | None) -> None:
        self.fd = fd
        self.tag = tag
        self.terminal = Sink(terminal_fd, "terminal")
        self.raw = Sink(raw_fd, f"{'stdout' if tag == b'O' else 'stderr'}.log")
        self.bytes_read = 0


class OutputPump(threading.Thread):
    def __init__(self, streams: list[Stream], combined_fd: int | None, line_cap: int = LINE_CAP) -> None:
        super().__init__(name="pitstop-pump", daemon=True)
        self.streams = streams
        self.combined = Sink(combined_fd, "combined.log")
        self.writer = CombinedWriter(CombinedLog(self.combined, line_cap))
        self.error: str | None = None
        self._stop_requested = threading.Event()

    def run(self) -> None:
        if self.combined.fd is not None:
            self.writer.start()
        try:
            self._loop()
        except BaseException as exc:  # a pump must not die silently: say what broke
            self.error = f"output pump failed: {exc!r}"
        finally:
            self.writer.finish()
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
                    self._feed(by_fd[fd], data)
                else:
                    poller.unregister(fd)
                    self.writer.end_line_of(by_fd.pop(fd).tag)

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
                self._feed(stream, data)

    def _feed(self, stream: Stream, data: bytes) -> None:
        stream.bytes_read += len(data)
        stream.terminal.write(data)
        stream.raw.write(data)
        self.writer.add(stream.tag, data, time.time())

    @property
    def sink_errors(self) -> list[str]:
        errors = [self.combined.error, self.writer.error, self.error]
        for s in self.streams:
            errors += [s.raw.error]  # a closed terminal is normal (`| head`), not worth a warning
        return [e for e in errors if e]
