"""Scan a whole byte stream once and report the first line each rule matches.

Memory stays bounded on any input: the stream is read in fixed windows that end at a line break
(a line longer than the carry limit is cut, keeping a tail so a match across the cut is still
found). Line numbers come from counting b'\n' in each window; evidence text is decoded (with
replacement) only for matched lines and truncated, so a 100 MB line never becomes a 100 MB str.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import BinaryIO

from pydantic import BaseModel, ConfigDict

from classifiers.engines import Engine
from classifiers.rule_model import Rule

WINDOW_BYTES = 8 * 1024 * 1024
MAX_CARRY_BYTES = 1024 * 1024  # a partial line longer than this is cut
CUT_OVERLAP_BYTES = 4096  # kept across a cut: longer than any rule's match
EVIDENCE_CHARS = 500
_CONTEXT_BEFORE = 200


class Hit(BaseModel):
    """The first line in one source where one rule matched (and its last, where different)."""

    model_config = ConfigDict(frozen=True)

    rule_index: int
    signature: str
    line: int
    text: str
    source: str
    last_line: int | None = None
    last_text: str | None = None


# Rules this weak (success/progress) match nearly every line; their last occurrence is not evidence.
LAST_MIN_PRIORITY = 10
_TAIL_START = 64 * 1024


def evidence_text(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").replace("\x00", "").rstrip("\r")
    text = "".join(ch if ch.isprintable() or ch == "\t" else "\ufffd" for ch in text)
    return text if len(text) <= EVIDENCE_CHARS else text[: EVIDENCE_CHARS - 1] + "…"


class _RuleConfirmer:
    """Re-runs one rule with Python `re` on the matched line to fill its signature template."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self._rules = rules
        self._compiled: dict[int, re.Pattern[bytes]] = {}

    def _regex(self, index: int) -> re.Pattern[bytes]:
        regex = self._compiled.get(index)
        if regex is None:
            rule = self._rules[index]
            flags = re.MULTILINE | (re.IGNORECASE if rule.caseless else 0)
            regex = self._compiled[index] = re.compile(rule.pattern.encode(), flags)
        return regex

    def signature(self, index: int, line: bytes) -> str:
        rule = self._rules[index]
        if "{1}" not in rule.signature:
            return rule.signature
        match = self._regex(index).search(line)
        return rule.signature_for(match.groups() if match else ())

    def last_start(self, index: int, window: bytes, limit: int) -> int | None:
        """Start of the last match in window[:limit], searching tail regions of doubling size."""
        size = _TAIL_START
        while True:
            lo = max(limit - size, 0)
            lo = window.rfind(b"\n", 0, lo) + 1 if lo else 0  # whole lines only
            last = None
            for match in self._regex(index).finditer(window, lo, limit):
                last = match.start()
            if last is not None or lo == 0:
                return last
            size *= 4

    def match_start(self, index: int, region: bytes) -> int | None:
        """Where the rule's match starts in `region` (engines report different offsets)."""
        match = self._regex(index).search(region)
        return match.start() if match else None


def _line_bounds(window: bytes, offset: int, limit: int) -> tuple[int, int]:
    start = window.rfind(b"\n", 0, offset) + 1
    end = window.find(b"\n", offset, limit)
    return start, limit if end < 0 else end


def scan_stream(
    stream: BinaryIO,
    engine: Engine,
    rules: Sequence[Rule],
    source: str,
    window_bytes: int = WINDOW_BYTES,
) -> list[Hit]:
    """First hit per rule over the whole stream, in rule order of discovery."""
    confirmer = _RuleConfirmer(rules)
    hits: dict[int, Hit] = {}
    last: dict[int, tuple[int, str]] = {}  # rule -> (line, text) of its latest match so far
    carry = b""
    lines_before = 0  # newlines before the start of the current window
    while True:
        chunk = stream.read(window_bytes)
        at_end = not chunk
        window = carry + chunk if carry else chunk
        if not window:
            break
        if at_end:
            cut, carry = len(window), b""
        else:
            cut = window.rfind(b"\n") + 1
            if cut == 0 or len(window) - cut > MAX_CARRY_BYTES:
                # No line end in sight: scan it all, keep a tail for matches across the cut.
                cut = max(len(window) - CUT_OVERLAP_BYTES, 0) if len(window) > MAX_CARRY_BYTES else 0
            carry = window[cut:]
        # A view, not a copy: the window is scanned in place and sliced only for matched lines.
        body = memoryview(window)[:cut]
        if cut:
            for index, offset in engine.first_matches(body).items():
                if rules[index].priority >= LAST_MIN_PRIORITY:
                    found = confirmer.last_start(index, window, cut)
                    if found is not None:
                        start, end = _line_bounds(window, found, cut)
                        line = lines_before + window.count(b"\n", 0, found) + 1
                        last[index] = (line, evidence_text(window[max(start, found - _CONTEXT_BEFORE):min(end, found + EVIDENCE_CHARS)]))
                if index in hits:
                    continue
                start, end = _line_bounds(window, offset, cut)
                if end - start > EVIDENCE_CHARS:
                    # Long line: show the text around the match, found the same way by every engine.
                    lo = max(start, offset - CUT_OVERLAP_BYTES)
                    found = confirmer.match_start(index, window[lo : min(end, offset + CUT_OVERLAP_BYTES)])
                    anchor = lo + found if found is not None else offset
                    start = max(start, anchor - _CONTEXT_BEFORE)
                    end = min(end, start + EVIDENCE_CHARS * 4)
                raw = window[start:end]
                hits[index] = Hit(
                    rule_index=index,
                    signature=confirmer.signature(index, raw),
                    line=lines_before + window.count(b"\n", 0, offset) + 1,
                    text=evidence_text(raw),
                    source=source,
                )
            lines_before += window.count(b"\n", 0, cut)
        if at_end:
            break
    out = []
    for index, hit in hits.items():
        if index in last and last[index][0] != hit.line:
            hit = hit.model_copy(update={"last_line": last[index][0], "last_text": last[index][1]})
        out.append(hit)
    return sorted(out, key=lambda hit: hit.line)
