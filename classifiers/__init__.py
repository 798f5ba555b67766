"""Name the root cause of a failed job, with the lines that prove it.

    classify_text(text, facts=None, kernel_text=None) -> Verdict
    classify_files(paths, facts=None, kernel_log=None) -> Verdict

All given sources (job logs, kernel log, scheduler facts) combine into ONE verdict. Files are read
whole, in bounded windows, so a fatal Xid on line 1 of a 1 GB log still counts. `RULES` is the
ordered rule table; `hint_for(signature)` gives a signature's one-line operator hint.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from pitstop.models import SchedulerFacts, Verdict

from classifiers.decide import candidates_from, decide
from classifiers.engines import Engine, build_engine
from classifiers.rule_model import Rule
from classifiers.rules import RULES, rules_by_signature
from classifiers.scan import Hit, scan_stream
from classifiers.scheduler_facts import fact_hits

__all__ = [
    "RULES",
    "Rule",
    "ClassifyError",
    "classify_files",
    "classify_text",
    "hint_for",
    "rules_by_signature",
]


class ClassifyError(OSError):
    """A source could not be read; the message names the file and the reason."""


@lru_cache(maxsize=4)
def _engine(prefer: str | None = None) -> Engine:
    return build_engine(RULES, prefer)


def _as_bytes(text: str | bytes) -> bytes:
    return text.encode("utf-8", errors="surrogateescape") if isinstance(text, str) else bytes(text)


def _scan_text(text: str | bytes, source: str, engine: Engine) -> list[Hit]:
    return scan_stream(io.BytesIO(_as_bytes(text)), engine, RULES, source)


def _scan_file(path: Path, source: str, engine: Engine) -> list[Hit]:
    try:
        with open(path, "rb", buffering=0) as stream:
            return scan_stream(stream, engine, RULES, source)
    except IsADirectoryError as exc:
        raise ClassifyError(f"cannot classify {path}: it is a directory, not a log file") from exc
    except FileNotFoundError as exc:
        raise ClassifyError(f"cannot classify {path}: no such file") from exc
    except PermissionError as exc:
        raise ClassifyError(f"cannot classify {path}: permission denied") from exc
    except OSError as exc:
        raise ClassifyError(f"cannot classify {path}: {exc.strerror or exc}") from exc


def classify_text(
    text: str | bytes,
    facts: SchedulerFacts | None = None,
    kernel_text: str | bytes | None = None,
    *,
    engine: str | None = None,
) -> Verdict:
    """Classify one job log given as text (plus optional scheduler facts and kernel lines)."""
    eng = _engine(engine)
    sources = [_scan_text(text, "log", eng)]
    if kernel_text is not None:
        sources.append(_scan_text(kernel_text, "kernel", eng))
    return decide(candidates_from(sources, RULES, fact_hits(facts)))


def classify_files(
    paths: Sequence[Path | str],
    facts: SchedulerFacts | None = None,
    kernel_log: Path | str | None = None,
    *,
    engine: str | None = None,
) -> Verdict:
    """Classify a job from its log files (e.g. stdout + stderr) as one verdict.

    Raises ClassifyError when a file cannot be read, naming the file.
    """
    eng = _engine(engine)
    sources = [_scan_file(Path(p), str(p), eng) for p in paths]
    if kernel_log is not None:
        sources.append(_scan_file(Path(kernel_log), "kernel", eng))
    return decide(candidates_from(sources, RULES, fact_hits(facts)))


def hint_for(signature: str) -> str:
    """The operator hint for a verdict signature ('xid-62' finds its 'xid-{1}' row); '' if unknown.

    A Verdict already carries its hint; this is for callers that only stored the signature.
    """
    from classifiers.scheduler_facts import EXIT_ZERO, SIGNAL_RULES, STATE_RULES

    table = rules_by_signature()
    if signature in table:
        return table[signature].hint
    fallback = ""
    for rule in sorted(RULES, key=lambda r: -r.priority):
        prefix, templated, suffix = rule.signature.partition("{1}")
        if not templated or not (signature.startswith(prefix) and signature.endswith(suffix)):
            continue
        value = signature[len(prefix): len(signature) - len(suffix)]
        if value and re.search(r"(?<![0-9A-Za-z])" + re.escape(value) + r"(?![0-9A-Za-z])", rule.pattern):
            return rule.hint
        fallback = fallback or ""
        if "[0-9]+" in rule.pattern or "[A-Z][A-Za-z0-9_]*" in rule.pattern:
            fallback = rule.hint
    if fallback:
        return fallback
    for fact_rule in (*STATE_RULES.values(), *SIGNAL_RULES.values(), EXIT_ZERO):
        if fact_rule.signature == signature:
            return fact_rule.hint
    return ""
