"""What a scan of one source reports, before any decision: rule hits and progress findings.

Its own module so that both the scanner (which produces these) and `decide` (which weighs them)
import it, and neither imports the other.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


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


class ProgressHit(BaseModel):
    """A training-progress finding (classifiers.progress) in one source, with resolved line numbers."""

    model_config = ConfigDict(frozen=True)

    signature: str
    priority: int
    confidence: float
    hint: str
    evidence: list[tuple[int, str]]  # (1-based line, text): the deciding line first
    source: str
    cause: str = "numerical"  # a Cause value: numerical, or success for routine fp16 overflow
