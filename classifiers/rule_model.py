"""The shape of one classification rule. The table itself lives in `rules.py`.

A rule is data: cause, stable signature, one-line pattern, priority and an operator hint.
Patterns use the regex subset shared by Python `re`, RE2 and Hyperscan (no look-around, no
back-references) and must never match across a newline: every engine scans whole files and
reports lines, so a pattern that could span lines would give engine-dependent answers.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from pitstop.models import Cause

# A rival cause within this many priority points of the winner makes a verdict less sure
# (classifiers.decide); the scanner's pruning keeps such rivals in the scan (classifiers.scan).
CLOSE_PRIORITY = 5

# Validation context of the built-in tables (rules.py, xid_rules.py): their patterns are compiled by
# every engine in tests/classifiers/test_rules.py, so loading them skips `re`'s compile, which
# costs ~0.13 s of every `pitstop classify` start (the scanner compiles only the rules that hit).
BUILT_IN = "built_in_table"

# Tokens that would let a pattern run over a line end, or that Hyperscan/RE2 reject.
_FORBIDDEN = (r"\s", r"\S", r"(?=", r"(?!", r"(?<", r"\n", "[^")
_BACK_REFERENCE = re.compile(r"(?<!\\)\\[1-9]")


class Rule(BaseModel):
    model_config = ConfigDict(frozen=True)

    signature: str = Field(description="stable id; '{1}' is replaced by the first capture group that matched")
    cause: Cause
    pattern: str = Field(description="one-line regex, case-insensitive unless caseless=False")
    priority: int = Field(ge=0, le=1000, description="higher wins: root causes beat symptoms")
    hint: str = Field(description="what an operator should do, in one line")
    confidence: float = Field(default=0.9, ge=0.0, le=1.0)
    caseless: bool = True
    defers_to_xid: bool = Field(
        default=False,
        description="an application's wording of a GPU event: a catalogued Xid for it, when present, decides",
    )
    ends_run: bool = Field(
        default=False,
        description="the line is the run's own final verdict of success (a benchmark's run_stop): what "
        "fails after it in the same log is shutdown noise, unless it names hardware or memory",
    )
    routine: bool = Field(
        default=False,
        description="healthy runs print it too (an fp16 overflow skip, a numpy warning): a success line "
        "after it in the same log outranks it",
    )
    consequence: bool = Field(
        default=False,
        description="printed because something else ended the step (srun cancelling a step after a "
        "task failed): an earlier failing line in the same log outranks it",
    )

    @classmethod
    def built_in(cls, **fields) -> Rule:
        """A row of a table shipped with Pitstop (a site's rules go through the full check)."""
        return cls.model_validate(fields, context={BUILT_IN: True})

    @field_validator("pattern")
    @classmethod
    def _portable_single_line(cls, pattern: str, info: ValidationInfo) -> str:
        if _BACK_REFERENCE.search(pattern):
            raise ValueError(f"pattern {pattern!r} uses a back-reference, which Hyperscan and RE2 do not support")
        for token in _FORBIDDEN:
            if token in pattern.replace(r"[^\n", ""):
                raise ValueError(
                    f"pattern {pattern!r} uses {token!r}: use ' ' / [ \\t] and write negated "
                    r"classes as [^\n...] so matches stay on one line in every engine"
                )
        if (info.context or {}).get(BUILT_IN):
            return pattern
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"pattern {pattern!r} is not a valid regex: {exc}") from exc
        return pattern

    def signature_for(self, groups: tuple[bytes | None, ...]) -> str:
        """The signature with `{1}` filled from the match (e.g. the Xid number)."""
        if "{1}" not in self.signature:
            return self.signature
        # A pattern with alternatives (two Xid line forms) fills {1} from whichever matched.
        first = next((g for g in groups if g), None)
        value = first.decode("ascii", "replace") if first else "unknown"
        return self.signature.replace("{1}", value)
