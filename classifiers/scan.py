"""Scan a whole byte stream once and report the first (and last) line each rule matches.

Memory stays bounded on any input: the stream is read into a few reused window buffers that end
at a line break (a line longer than the carry limit is cut, and the next window re-reads a tail so
a match across the cut is still found). Evidence text is decoded (with replacement) only for
matched lines and truncated, so a 100 MB line never becomes a 100 MB str.

Speed (a 1 GB log should classify no slower than `LC_ALL=C grep -E -c` takes to count it):
- windows are examined on a small thread pool: Hyperscan releases the GIL while it scans, so one
  thread scans while another counts line breaks (the other big cost) or reads the next window;
- rules that can no longer change the verdict are dropped from the scan of later windows (see
  `_Pruning`): a weak rule once found (only its first line is evidence), and, once a strong hit
  is in, rules too weak to win, to rival it or to corroborate any cause that still could win;
- a rule's last occurrence is looked up only in windows where it matched, from the window's end;
- counting line breaks costs as much as scanning, so for a regular file a window without hits is
  not counted; a later hit re-reads (pread) just the uncounted stretch before it. Pipes and
  in-memory text cannot be re-read and are counted as they pass.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import BinaryIO, NamedTuple

from pitstop.files import read_at_most
from pitstop.models import Cause

from classifiers import progress as _progress
from classifiers.engines import LAST_MIN_PRIORITY, Engine
from classifiers.hits import Hit, ProgressHit
from classifiers.rule_model import CLOSE_PRIORITY, Rule
from classifiers.transcode import utf8_view
from classifiers.xid_rules import WEAK as XID_WEAK

__all__ = ["Hit", "ProgressHit", "evidence_text", "scan_stream"]

WINDOW_BYTES = 8 * 1024 * 1024
MAX_CARRY_BYTES = 1024 * 1024  # a partial line longer than this is cut
CUT_OVERLAP_BYTES = 4096  # re-read across a cut: longer than any rule's match
EVIDENCE_CHARS = 500
_CONTEXT_BEFORE = 200
_WHOLE_LINE_ANCHOR = 64 * 1024  # lines up to this long are re-anchored by `re` over the whole line
# The progress analyzer (classifiers.progress) reads only these: the head and the tail of a source.
HEAD_SAMPLE_BYTES = 128 * 1024
TAIL_SAMPLE_BYTES = 384 * 1024
# Two threads are enough: one scans (GIL released) while the other counts lines or builds
# evidence (GIL held); the main thread reads ahead (GIL released too).
SCAN_THREADS = min(2, os.cpu_count() or 1)


def evidence_text(raw: bytes | bytearray) -> str:
    text = raw.decode("utf-8", errors="replace").replace("\x00", "").rstrip("\r")
    text = "".join(ch if ch.isprintable() or ch == "\t" else "\ufffd" for ch in text)
    return text if len(text) <= EVIDENCE_CHARS else text[: EVIDENCE_CHARS - 1] + "…"


class _RuleConfirmer:
    """Re-runs one rule with Python `re` on a matched line: signature template, match anchors.

    Every engine reports offsets differently; anchoring evidence with `re` keeps it identical.
    """

    def __init__(self, rules: Sequence[Rule]) -> None:
        self._rules = rules
        self._compiled: dict[int, re.Pattern[bytes]] = {}

    def _regex(self, index: int) -> re.Pattern[bytes]:
        regex = self._compiled.get(index)
        if regex is None:  # a racing thread compiles the same pattern: harmless (re caches)
            rule = self._rules[index]
            flags = re.MULTILINE | (re.IGNORECASE if rule.caseless else 0)
            regex = self._compiled[index] = re.compile(rule.pattern.encode(), flags)
        return regex

    def signature(self, index: int, line: bytes | bytearray) -> str:
        rule = self._rules[index]
        if "{1}" not in rule.signature:
            return rule.signature
        match = self._regex(index).search(line)
        return rule.signature_for(match.groups() if match else ())

    def match_start(self, index: int, region: bytes | bytearray) -> int | None:
        """Where the rule's match starts in `region`."""
        match = self._regex(index).search(region)
        return match.start() if match else None

    def last_start(self, index: int, data: bytes | bytearray, lo: int, hi: int) -> int | None:
        """Start of the last match in data[lo:hi]."""
        last = None
        for match in self._regex(index).finditer(data, lo, hi):
            last = match.start()
        return last


def _line_bounds(data: bytes | bytearray, offset: int, limit: int) -> tuple[int, int]:
    start = data.rfind(b"\n", 0, offset) + 1
    end = data.find(b"\n", offset, limit)
    return start, limit if end < 0 else end


class _Window(NamedTuple):
    data: bytes | bytearray  # often a reused buffer: only data[:scan_end] belongs to this window
    scan_end: int  # scan data[:scan_end]
    advance: int  # the next window starts at data[advance]; newlines before it are this window's
    start: int  # stream offset of data[0]


class _Found(NamedTuple):
    offset: int
    text: str
    signature: str


class _Result(NamedTuple):
    newlines: int | None  # line breaks in data[:advance]; None: not counted (no hits, re-readable)
    first: dict[int, tuple[int, _Found]]  # rule -> (line breaks before its first match, evidence)
    last: dict[int, tuple[int, _Found]]  # same for its last match, for rules that keep one


def _read_full(stream: BinaryIO, into: memoryview) -> int:
    """Fill `into` unless the stream ends first (pipes return short reads)."""
    readinto = getattr(stream, "readinto", None)
    total = 0
    while total < len(into):
        if readinto is not None:
            got = readinto(into[total:])
        else:
            chunk = stream.read(len(into) - total)
            got = len(chunk or b"")
            into[total : total + got] = chunk or b""
        if not got:
            break
        total += got
    return total


def _windows(stream: BinaryIO, window_bytes: int, free: list[bytearray]) -> Iterator[_Window]:
    """Line-aligned windows over the stream, in order. Buffers come from (and go back to) `free`.

    The first window is read as plain bytes, so a small log never allocates a 9 MB buffer.
    """
    carry = b""
    start = 0  # stream offset of buf[0]
    slack = min(MAX_CARRY_BYTES, max(window_bytes // 8, 4096))  # room for the usual short carry
    first = True
    while True:
        need = len(carry) + window_bytes
        if first:
            buf: bytes | bytearray = read_at_most(stream, window_bytes)
            got = len(buf)
            first = False
        else:
            # Reuse buffers: a fresh 9 MB bytearray costs a memset and thousands of page faults.
            fits = next((i for i, b in enumerate(free) if len(b) >= need), None)
            buf = free.pop(fits) if fits is not None else bytearray(need + slack)
            buf[: len(carry)] = carry
            with memoryview(buf) as view:
                got = _read_full(stream, view[len(carry) : need])
        n = len(carry) + got
        at_end = got < window_bytes
        if at_end:
            scan_end = advance = n
        else:
            cut = buf.rfind(b"\n", 0, n) + 1
            if cut and n - cut <= MAX_CARRY_BYTES:
                scan_end = advance = cut
            elif n <= MAX_CARRY_BYTES:
                scan_end = advance = 0  # one long partial line so far: read on before scanning
            else:
                # No line end in sight: scan it all; the next window re-reads the tail (no line
                # breaks in it) so a match across the cut is still found whole.
                scan_end, advance = n, n - CUT_OVERLAP_BYTES
        carry = bytes(buf[advance:n])
        if scan_end:
            yield _Window(buf, scan_end, advance, start)
        elif isinstance(buf, bytearray):
            free.append(buf)
        start += advance
        if at_end:
            return


class _Examiner:
    """Everything done to one window; runs on worker threads, touches nothing shared but caches."""

    def __init__(self, engine: Engine, rules: Sequence[Rule], defer_counting: bool) -> None:
        self._engine = engine
        self._rules = rules
        self._confirmer = _RuleConfirmer(rules)
        self._defer = defer_counting

    def __call__(self, window: _Window, skip: frozenset[int], known: frozenset[int], last_min: int) -> _Result:
        data, scan_end = window.data, window.scan_end
        with memoryview(data) as view, view[:scan_end] as body:
            matches = self._engine.first_matches(body, skip)
        first: dict[int, _Found] = {}
        last: dict[int, _Found] = {}
        for index, offset in matches.items():
            if index not in known:
                first[index] = self._first(index, data, offset, scan_end)
        keeps_last = frozenset(i for i in matches if self._rules[i].priority >= last_min)
        if keeps_last:
            for index, offset in self._engine.last_matches(keeps_last, data, scan_end).items():
                last[index] = self._last(index, data, offset, scan_end)
        if self._defer and not first and not last:
            # Counting line breaks costs as much as scanning: a window without hits is counted
            # later (re-read from the file) only if a hit further on needs its line numbers.
            return _Result(newlines=None, first={}, last={})
        # One pass of line-break counting serves every hit and the window total.
        points = sorted({f.offset for f in first.values()} | {f.offset for f in last.values()} | {window.advance})
        before: dict[int, int] = {}
        counted, at = 0, 0
        for point in points:
            counted += data.count(b"\n", at, point) if point > at else 0
            at = max(at, point)
            before[point] = counted
        return _Result(
            newlines=before[window.advance],
            first={i: (before[f.offset], f) for i, f in first.items()},
            last={i: (before[f.offset], f) for i, f in last.items()},
        )

    def _first(self, index: int, data: bytearray, offset: int, limit: int) -> _Found:
        start, end = _line_bounds(data, offset, limit)
        if end - start > EVIDENCE_CHARS:
            # Long line: show the text around the match, found the same way by every engine.
            lo = max(start, offset - CUT_OVERLAP_BYTES)
            found = self._confirmer.match_start(index, data[lo : min(end, offset + CUT_OVERLAP_BYTES)])
            anchor = lo + found if found is not None else offset
            start = max(start, anchor - _CONTEXT_BEFORE)
            end = min(end, start + EVIDENCE_CHARS * 4)
        raw = data[start:end]
        return _Found(offset, evidence_text(raw), self._confirmer.signature(index, raw))

    def _last(self, index: int, data: bytearray, offset: int, limit: int) -> _Found:
        start, end = _line_bounds(data, offset, limit)
        if end - start <= _WHOLE_LINE_ANCHOR:
            lo, hi = start, end
        else:
            lo, hi = max(start, offset - CUT_OVERLAP_BYTES), min(end, offset + CUT_OVERLAP_BYTES)
        found = self._confirmer.last_start(index, data, lo, hi)
        anchor = found if found is not None else offset
        raw = data[max(start, anchor - _CONTEXT_BEFORE) : min(end, anchor + EVIDENCE_CHARS)]
        return _Found(offset, evidence_text(raw), "")


class _FileLineCounter:
    """Counts line breaks in a byte range of a regular file, re-reading it with pread."""

    CHUNK = 8 * 1024 * 1024

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buf = bytearray(self.CHUNK)

    def count(self, start: int, end: int) -> int:
        total = 0
        with memoryview(self._buf) as view:
            while start < end:
                got = os.preadv(self._fd, [view[: min(self.CHUNK, end - start)]], start)
                if got <= 0:
                    raise OSError(f"the log shrank while it was being read (at byte {start})")
                total += self._buf.count(b"\n", 0, got)
                start += got
        return total


def _regular_file_fd(stream: BinaryIO) -> int | None:
    """The descriptor when the stream is a regular file (re-readable by offset), else None."""
    import stat

    try:
        fd = stream.fileno()
        return fd if stat.S_ISREG(os.fstat(fd).st_mode) and hasattr(os, "preadv") else None
    except (AttributeError, OSError, ValueError):
        return None


class _Pruning:
    """Which rules later windows may skip without changing the verdict `decide` will reach.

    With a hit of priority P in this source, the final winner has priority >= P whatever the other
    sources say. A rule then still matters if it could win (priority >= P), rival the winner
    (within decide's close margin of P), or corroborate it: its cause has a rule or scheduler
    fact of priority >= P. Success hits are left out of P: a failed scheduler state discards them.
    Found rules keep being scanned only while their last occurrence may become evidence.
    """

    def __init__(self, rules: Sequence[Rule]) -> None:
        from classifiers.scheduler_facts import EXIT_NONZERO, EXIT_ZERO, SIGNAL_RULES, STATE_RULES

        self._rules = rules
        self._margin = CLOSE_PRIORITY
        cause_max: dict[Cause, int] = {}
        facts = (*STATE_RULES.values(), *SIGNAL_RULES.values(), EXIT_ZERO, EXIT_NONZERO)
        for item in (*rules, *facts):
            cause_max[item.cause] = max(cause_max.get(item.cause, 0), item.priority)
        self._cause_max = cause_max
        self._cache: dict[tuple[int, frozenset[int], bool], frozenset[int]] = {}
        # A catalogued Xid above WEAK takes over from a winner that defers to it (decide): while
        # such a winner holds P, those Xid rules must still be scanned whatever their priority.
        self._xid_rules = frozenset(i for i, rule in enumerate(rules)
                                    if rule.signature.startswith("xid-") and rule.priority > XID_WEAK)

    def strongest(self, found) -> int:
        # A routine hit (decide.routine_before_success) may still lose to a later success line, so
        # like a success hit it sets no floor.
        return max((self._rules[i].priority for i in found
                    if self._rules[i].cause is not Cause.SUCCESS and not self._rules[i].routine), default=0)

    def skip(self, found) -> frozenset[int]:
        # Keyed by (P, found weak rules) only, so a whole scan needs just a few engine databases.
        strongest = self.strongest(found)
        weak_found = frozenset(i for i in found if self._rules[i].priority < LAST_MIN_PRIORITY)
        deferring = any(self._rules[i].defers_to_xid and self._rules[i].priority >= strongest for i in found)
        key = (strongest, weak_found, deferring)
        skip = self._cache.get(key)
        if skip is None:
            hopeless = {
                i for i, rule in enumerate(self._rules)
                if rule.priority <= strongest - self._margin and self._cause_max[rule.cause] < strongest
            }
            if deferring:
                hopeless -= self._xid_rules
            skip = self._cache[key] = frozenset(hopeless | weak_found)
        return skip


class _Sample:
    """The first and last bytes of a stream, kept as its windows pass (bounded, a copy per window)."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.tail_start = 0  # stream offset of tail[0]

    def add(self, data: bytes | bytearray, own: int, start: int) -> None:
        """`data[:own]` are the bytes at stream offset `start` (windows arrive in order, contiguous)."""
        if len(self.head) < HEAD_SAMPLE_BYTES:
            self.head += data[: min(own, HEAD_SAMPLE_BYTES - len(self.head))]
        if own >= TAIL_SAMPLE_BYTES:
            self.tail = bytearray(data[own - TAIL_SAMPLE_BYTES: own])
            self.tail_start = start + own - TAIL_SAMPLE_BYTES
            return
        self.tail += data[:own]
        drop = len(self.tail) - TAIL_SAMPLE_BYTES
        if drop > 0:
            del self.tail[:drop]
            self.tail_start += drop

    def lines(self) -> tuple[list[tuple[tuple[int, int], bytes]], int]:
        """Whole lines as ((segment, index), line) and the offset where segment 1 (the tail) starts.

        Segment 0 starts at offset 0 (line index + 1 is its line number); segment 1 is the tail's
        whole lines when the stream is longer than head and tail together.
        """
        if self.tail_start <= len(self.head):
            whole = bytes(self.head[: self.tail_start]) + bytes(self.tail)
            return [((0, i), line) for i, line in enumerate(whole.split(b"\n"))], -1
        head = bytes(self.head).split(b"\n")[:-1]  # the last piece may be a cut line
        cut = self.tail.find(b"\n") + 1
        tail = bytes(self.tail[cut:]).split(b"\n") if cut else []
        return ([((0, i), line) for i, line in enumerate(head)]
                + [((1, i), line) for i, line in enumerate(tail)]), self.tail_start + cut


def scan_stream(
    stream: BinaryIO,
    engine: Engine,
    rules: Sequence[Rule],
    source: str,
    window_bytes: int = WINDOW_BYTES,
    threads: int = SCAN_THREADS,
    prune: bool = True,
    progress: list[ProgressHit] | None = None,
) -> list[Hit]:
    """First hit per rule over the whole stream, with its last line where that can be evidence.

    With a `progress` list, the training-progress analyzer (classifiers.progress) reads the head and
    tail of the stream kept while scanning, and its findings are appended to that list.

    `prune=False` scans every rule over every window (the reference the pruning is tested against).
    A UTF-16/32 log (byte-order mark) is scanned as the UTF-8 of its text (classifiers.transcode).
    """
    stream = utf8_view(stream)
    fd = _regular_file_fd(stream)
    counter = _FileLineCounter(fd) if fd is not None else None
    examine = _Examiner(engine, rules, defer_counting=counter is not None)
    pruning = _Pruning(rules)
    hits: dict[int, Hit] = {}
    last: dict[int, tuple[int, str]] = {}  # rule -> (line, text) of its latest match so far
    lines_before = 0  # newlines before `counted_to` in the stream
    counted_to = 0  # stream offset up to which lines_before is exact (windows after it: deferred)
    free: list[bytearray] = []
    sample = _Sample() if progress is not None else None

    def merge(window: _Window, result: _Result) -> None:
        nonlocal lines_before, counted_to
        if sample is not None:
            sample.add(window.data, window.advance, window.start)
        if isinstance(window.data, bytearray):
            free.append(window.data)
        if result.newlines is None:
            return  # no hits; its lines are counted later only if a later hit needs them
        if counted_to < window.start:
            lines_before += counter.count(counted_to, window.start)
        for index, (breaks, found) in result.first.items():
            if index not in hits:
                hits[index] = Hit(rule_index=index, signature=found.signature, line=lines_before + breaks + 1,
                                  text=found.text, source=source)
        for index, (breaks, found) in result.last.items():
            last[index] = (lines_before + breaks + 1, found.text)
        lines_before += result.newlines
        counted_to = window.start + window.advance

    def plan() -> tuple[frozenset[int], frozenset[int], int]:
        # Only windows already merged (all earlier in the stream) decide what later ones skip.
        # A last occurrence is evidence only for a rule that can still win.
        if not prune:
            return frozenset(), frozenset(hits), LAST_MIN_PRIORITY
        last_min = max(pruning.strongest(hits), LAST_MIN_PRIORITY)
        return pruning.skip(hits), frozenset(hits), last_min

    windows = _windows(stream, window_bytes, free)
    head = next(windows, None)
    if head is not None:
        merge(head, examine(head, *plan()))  # inline: small inputs never start a thread
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="pitstop-scan") if threads > 1 else None
    pending: deque[tuple[_Window, Future[_Result]]] = deque()
    try:
        for window in windows:
            if pool is None:
                merge(window, examine(window, *plan()))
                continue
            pending.append((window, pool.submit(examine, window, *plan())))
            while len(pending) > threads:
                done, future = pending.popleft()
                merge(done, future.result())
        while pending:
            done, future = pending.popleft()
            merge(done, future.result())
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    if sample is not None:
        def newlines_before(offset: int) -> int:
            # Only called for an offset inside the tail, and only when a finding needs a line number.
            if offset >= counted_to:
                return lines_before + (counter.count(counted_to, offset) if counter is not None else 0)
            return lines_before - sample.tail[offset - sample.tail_start: counted_to - sample.tail_start].count(b"\n")

        progress.extend(_progress_hits(sample, source, newlines_before))
    out = []
    last_min = max(pruning.strongest(hits), LAST_MIN_PRIORITY) if prune else LAST_MIN_PRIORITY
    for index, hit in hits.items():
        if rules[index].priority >= last_min and index in last and last[index][0] != hit.line:
            hit = hit.model_copy(update={"last_line": last[index][0], "last_text": last[index][1]})
        out.append(hit)
    return sorted(out, key=lambda hit: hit.line)


def _progress_hits(sample: _Sample, source: str, newlines_before) -> list[ProgressHit]:
    lines, tail_at = sample.lines()
    findings = _progress.analyze(lines)
    if not findings:
        return []
    tail_base: list[int] = []  # resolved once, lazily: counting may re-read part of the file

    def line_no(key: tuple[int, int]) -> int:
        segment, index = key
        if segment == 0:
            return index + 1
        if not tail_base:
            tail_base.append(newlines_before(tail_at))
        return tail_base[0] + index + 1

    return [
        ProgressHit(signature=f.signature, priority=f.priority, confidence=f.confidence, hint=f.hint, cause=f.cause,
                    evidence=[(line_no(key), evidence_text(text.encode("utf-8", "surrogateescape")))
                              for key, text in f.evidence],
                    source=source)
        for f in findings
    ]
