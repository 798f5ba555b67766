"""Operators' corrections of incident causes (`pitstop label`), and the log excerpt each keeps.

    record_label(store, LabelInput(...)) -> LabelRecord        # a new row; older ones stay
    latest_labels(store) -> list[LabelRecord]                  # the label of each labelled incident
    label_history(store, incident_id) -> list[LabelRecord]     # oldest first

The incidents table keeps only the verdict's few evidence lines, not the job's log paths, so a
label snapshots a bounded excerpt of the logs when it is made (`read_excerpt`): the tail, the
error-like lines of the head and tail, and the lines the caller marks (the classifier's hits
anywhere in the file). Re-scoring later needs only the row, even after the logs are rotated away.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, Field
from sqlmodel import col, select

from pitstop.files import open_regular
from pitstop.models import Cause, SchedulerFacts
from pitstop.store.db import Store
from pitstop.store.records import RecordError
from pitstop.store.tables import Incident, IncidentLabel

# Bounds of one label's snapshot: a few pages, not the log. A 1 GB log costs two seeks.
MAX_EXCERPT_BYTES = 64 * 1024  # all log sources of one label together
MAX_KERNEL_EXCERPT_BYTES = 16 * 1024
TAIL_LINES = 200  # the end of a log is where a job says why it died
HEAD_BYTES = 64 * 1024
TAIL_BYTES = 256 * 1024
MAX_LINE_CHARS = 500  # like classifier evidence: one absurd line must not eat the budget

# Words a failing job's log uses on the lines worth keeping beyond the tail (kept short on
# purpose: the classifier's own hits, marked by the caller, cover every rule anywhere).
_ERROR_LIKE = re.compile(
    rb"error|exception|traceback|fatal|fail|abort|killed|panic|denied|cannot|unable|refused|"
    rb"timed? ?out|segmentation|core dumped|signal|exit(ed)? (code|status)|nan\b|inf\b|overflow|oom",
    re.IGNORECASE,
)


class SourceNote(BaseModel):
    """Where one part of an excerpt came from, for the operator reading the label later."""

    path: str
    size: int | None = None
    lines: int = Field(0, description="lines kept from it")
    truncated: bool = Field(False, description="lines were left out")


class LogExcerpt(BaseModel):
    text: str = ""
    sources: list[SourceNote] = Field(default_factory=list)


class LabelInput(BaseModel):
    incident_id: int
    cause: Cause
    by: str
    note: str = ""
    excerpt: LogExcerpt | None = Field(None, description="None: keep the previous label's snapshot")
    kernel_excerpt: str | None = None
    facts: SchedulerFacts | None = None


class LabelRecord(BaseModel):
    id: int
    incident_id: int
    cause: Cause
    predicted_cause: str
    predicted_signature: str
    note: str
    labelled_by: str
    labelled_at: datetime
    excerpt: str
    kernel_excerpt: str | None = None
    facts: SchedulerFacts | None = None
    sources: list[SourceNote] = Field(default_factory=list)


def _record(row: IncidentLabel) -> LabelRecord:
    at = row.labelled_at if row.labelled_at.tzinfo else row.labelled_at.replace(tzinfo=timezone.utc)
    return LabelRecord(
        id=row.id, incident_id=row.incident_id, cause=Cause(row.cause), predicted_cause=row.predicted_cause,
        predicted_signature=row.predicted_signature, note=row.note, labelled_by=row.labelled_by,
        labelled_at=at, excerpt=row.excerpt, kernel_excerpt=row.kernel_excerpt,
        facts=SchedulerFacts.model_validate(row.facts) if row.facts else None,
        sources=[SourceNote.model_validate(s) for s in row.sources or []],
    )


def record_label(store: Store, label: LabelInput) -> LabelRecord:
    """Add a label row. Without a new excerpt, the incident's previous snapshot is carried over
    (the logs may be gone by now); with none at all, the incident's stored evidence lines."""
    with store.session() as s:
        incident = s.get(Incident, label.incident_id)
        if incident is None:
            raise RecordError(f"no incident {label.incident_id} in {store.url} (`pitstop incidents` lists them)")
        previous = s.exec(
            select(IncidentLabel).where(IncidentLabel.incident_id == label.incident_id)
            .order_by(col(IncidentLabel.id).desc())
        ).first()
        excerpt, kernel, facts = label.excerpt, label.kernel_excerpt, label.facts
        if excerpt is None and previous is not None:
            excerpt = LogExcerpt(text=previous.excerpt, sources=[SourceNote.model_validate(x) for x in previous.sources])
            kernel = kernel if kernel is not None else previous.kernel_excerpt
            facts = facts if facts is not None else (SchedulerFacts.model_validate(previous.facts) if previous.facts else None)
        if excerpt is None:
            excerpt = evidence_excerpt(incident.evidence or [])
        row = IncidentLabel(
            incident_id=label.incident_id, cause=label.cause.value, predicted_cause=incident.cause,
            predicted_signature=incident.signature or "", note=label.note, labelled_by=label.by,
            excerpt=excerpt.text, kernel_excerpt=kernel,
            facts=facts.model_dump(mode="json", exclude_none=True) if facts is not None else None,
            sources=[n.model_dump() for n in excerpt.sources],
        )
        s.add(row)
        s.commit()
        s.refresh(row)
        return _record(row)


def latest_labels(store: Store) -> list[LabelRecord]:
    """The newest label of every labelled incident, by incident id."""
    with store.session() as s:
        rows = list(s.exec(select(IncidentLabel).order_by(col(IncidentLabel.id))))
    newest: dict[int, IncidentLabel] = {}
    for row in rows:  # ascending ids: the last one seen per incident is the newest
        newest[row.incident_id] = row
    return [_record(newest[i]) for i in sorted(newest)]


def label_history(store: Store, incident_id: int) -> list[LabelRecord]:
    with store.session() as s:
        rows = s.exec(select(IncidentLabel).where(IncidentLabel.incident_id == incident_id)
                      .order_by(col(IncidentLabel.id)))
        return [_record(r) for r in rows]


# --- the snapshot ---------------------------------------------------------------------------


def evidence_excerpt(evidence: list[dict]) -> LogExcerpt:
    """What is left when no log can be read: the verdict's own evidence lines."""
    lines = [str(e.get("text", ""))[:MAX_LINE_CHARS] for e in evidence if e.get("source") != "scheduler"]
    return LogExcerpt(text="\n".join(lines), sources=[SourceNote(path="(stored evidence lines)", lines=len(lines),
                                                                  truncated=True)])


def _line(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").rstrip("\r")
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 1] + "…"


def _lines_of(chunk: bytes, drop_first: bool, drop_last: bool) -> list[bytes]:
    lines = chunk.split(b"\n")
    if drop_first and lines:
        lines = lines[1:]  # starts mid-line
    if drop_last and lines:
        lines = lines[:-1]
    if lines and lines[-1] == b"":
        lines = lines[:-1]
    return lines


def read_excerpt(path: Path, marked: Mapping[int, str] | None = None,
                 budget: int = MAX_EXCERPT_BYTES) -> tuple[list[str], SourceNote]:
    """The lines of one log worth keeping, in file order, within `budget` bytes.

    Reads the first HEAD_BYTES and the last TAIL_BYTES only. `marked` maps 1-based line numbers
    anywhere in the file to their text (the classifier's hits). When the budget is tight the
    marked lines are kept first, then the last TAIL_LINES, then error-like lines (the later the
    better). Raises OSError (a FIFO or a device is refused, not read).
    """
    with open_regular(path) as stream:
        size = os.fstat(stream.fileno()).st_size
        head = stream.read(min(HEAD_BYTES, size))
        tail_start = max(size - TAIL_BYTES, len(head))
        stream.seek(tail_start)
        tail = stream.read(TAIL_BYTES)
    whole = tail_start == len(head)  # head and tail meet: every line is known, with its number
    if whole:
        head_lines, tail_lines = _lines_of(head + tail, False, False), []
    else:
        head_lines, tail_lines = _lines_of(head, False, True), _lines_of(tail, True, False)
    # key (segment, n): 0 = head (n = line number), 1 = a marked line past the head, 2 = tail (n = index)
    chosen: dict[tuple[int, int], tuple[int, str]] = {}  # key -> (rank: lower is kept first, text)
    known = [((0, i + 1), raw) for i, raw in enumerate(head_lines)] + [((2, i), raw) for i, raw in enumerate(tail_lines)]
    last_keys = {key for key, _ in known[-TAIL_LINES:]}
    for key, raw in known:
        if key in last_keys:
            chosen[key] = (1, _line(raw))
        elif _ERROR_LIKE.search(raw):
            chosen[key] = (2, _line(raw))
    tail_texts = {text: key for key, (_, text) in chosen.items() if key[0] == 2}
    for number, text in (marked or {}).items():
        text = text[:MAX_LINE_CHARS]
        key = (0, number) if number <= len(head_lines) else (1, number)
        if key[0] == 1 and text in tail_texts:  # the same line, seen in the tail
            key = tail_texts[text]
        chosen[key] = (0, text)
    kept: list[tuple[tuple[int, int], str]] = []
    used = 0
    for key, (_, text) in sorted(chosen.items(), key=lambda kv: (kv[1][0], -kv[0][0], -kv[0][1])):
        cost = len(text.encode("utf-8")) + 1
        if used + cost <= budget:
            used += cost
            kept.append((key, text))
    kept.sort()
    note = SourceNote(path=str(path), size=size, lines=len(kept),
                      truncated=not whole or len(kept) < len(head_lines))
    return [text for _, text in kept], note


def excerpt_logs(paths: list[Path], marked: Mapping[str, Mapping[int, str]] | None = None,
                 budget: int = MAX_EXCERPT_BYTES) -> tuple[LogExcerpt, list[str]]:
    """One excerpt over several logs (each gets an equal share of the budget) and the problems
    met (a log that cannot be read is named and skipped)."""
    lines: list[str] = []
    notes: list[SourceNote] = []
    problems: list[str] = []
    share = budget // max(len(paths), 1)
    for path in paths:
        try:
            kept, note = read_excerpt(path, (marked or {}).get(str(path), {}), share)
        except OSError as exc:
            problems.append(f"cannot read {path}: {exc.strerror or exc}")
            continue
        lines += kept
        notes.append(note)
    return LogExcerpt(text="\n".join(lines), sources=notes), problems


def kernel_excerpt(path: Path, budget: int = MAX_KERNEL_EXCERPT_BYTES) -> str | None:
    """The newest kernel lines (NVRM/Xid, as the flow kept them), or None if unreadable."""
    try:
        with open_regular(path) as stream:
            size = os.fstat(stream.fileno()).st_size
            stream.seek(max(size - budget, 0))
            data = stream.read(budget)
    except OSError:
        return None
    lines = _lines_of(data, size > budget, False)
    return "\n".join(_line(raw) for raw in lines) or None

