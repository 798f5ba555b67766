"""Classify a huge log by its head and tail, with line numbers that still point into the log.

Scanning a 2 GB log after the job ends would hold the report (and the job's exit) for tens of
seconds; the cause of a failure is near the end and the set-up problems near the start. The pump
counted the log's newlines, so evidence found in the tail is mapped back to its true line.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pitstop.config import WrapperSettings
from pitstop.models import Evidence, Verdict


class LogWindows:
    def __init__(self, scratch: Path, settings: WrapperSettings) -> None:
        self.scratch = scratch
        self.head_bytes = settings.classify_head_bytes
        self.tail_bytes = settings.classify_tail_bytes
        # window path -> (the log it came from, line offset)
        self._origin: dict[str, tuple[str, int]] = {}

    def of(self, log: Path, newlines: int) -> list[Path]:
        """The paths to classify for `log`: itself when small, else a head and a tail file."""
        try:
            size = log.stat().st_size
        except OSError:
            return [log]  # let the classifier say what is wrong with it
        if size <= self.head_bytes + self.tail_bytes:
            return [log]
        self.scratch.mkdir(exist_ok=True)
        head_path = self.scratch / f"{log.name}.head"
        tail_path = self.scratch / f"{log.name}.tail"
        with open(log, "rb") as src:
            _copy_whole_lines(src, 0, self.head_bytes, head_path)
            start = _next_line_start(src, size - self.tail_bytes)
            tail_lines = _copy_whole_lines(src, start, size - start, tail_path, final_partial=True)
        self._origin[str(head_path)] = (str(log), 0)
        self._origin[str(tail_path)] = (str(log), newlines - tail_lines)
        return [head_path, tail_path]

    def remap(self, verdict: Verdict) -> Verdict:
        if not self._origin:
            return verdict
        evidence = []
        for ev in verdict.evidence:
            source, offset = self._origin.get(ev.source, (ev.source, 0))
            line = ev.line + offset if ev.line else 0
            evidence.append(Evidence(line=line, text=ev.text, source=source))
        return verdict.model_copy(update={"evidence": evidence})

    def clean(self) -> None:
        if self._origin:
            shutil.rmtree(self.scratch, ignore_errors=True)


_PIECE = 1 << 20  # copy in pieces: the windows are tens of MB, the wrapper's memory is not


def _next_line_start(src, offset: int) -> int:
    src.seek(offset)
    while piece := src.read(64 * 1024):
        nl = piece.find(b"\n")
        if nl >= 0:
            return offset + nl + 1
        offset += len(piece)
    return offset


def _copy_whole_lines(src, start: int, length: int, dst: Path, final_partial: bool = False) -> int:
    """Copy [start, start+length) to dst, ending at a line break unless `final_partial`.
    Returns the number of newlines copied."""
    src.seek(start)
    newlines = 0
    with open(dst, "wb") as out:
        left = length
        while left > 0:
            piece = src.read(min(_PIECE, left))
            if not piece:
                break
            left -= len(piece)
            if left <= 0 and not final_partial:
                piece = piece[: piece.rfind(b"\n") + 1]
            newlines += piece.count(b"\n")
            out.write(piece)
    return newlines
