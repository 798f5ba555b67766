"""Name the root cause of a failed job, with the lines that prove it.

    classify_text(text, facts=None, kernel_text=None) -> Verdict
    classify_files(paths, facts=None, kernel_log=None) -> Verdict
    scan_logs(paths, open_log=None) -> LogScan; classify_scanned(scan, facts) -> Verdict
        the same in two steps, so logs can be scanned while a job still writes them (the
        facts, such as the exit code, are known only at its end)

All given sources (job logs, kernel log, scheduler facts) combine into ONE verdict. Files are read
whole, in bounded windows, so a fatal Xid on line 1 of a 1 GB log still counts. `RULES` is the
ordered rule table; `hint_for(signature)` gives a signature's one-line operator hint.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

from pydantic import BaseModel, Field

from pitstop.models import SchedulerFacts, Verdict

from classifiers.decide import candidates_from, decide
from classifiers.engines import Engine, build_engine
from classifiers.rule_model import Rule
from classifiers.rules import RULES, rules_by_signature
from classifiers.hits import Hit, ProgressHit
from classifiers.learned import Excerpt, excerpt_of_file, excerpt_of_text, fallback
from classifiers.scan import scan_stream
from classifiers.scheduler_facts import fact_hits
from classifiers.site_rules import configured_table

__all__ = [
    "RULES",
    "Rule",
    "ClassifyError",
    "classify_files",
    "classify_scanned",
    "classify_text",
    "LogScan",
    "scan_logs",
    "hint_for",
    "rules_by_signature",
]


class ClassifyError(OSError):
    """A source could not be read; the message names the file and the reason."""


# (engine name, id of the rule table) -> (that table, its engine). Keyed by identity: hashing a
# 150-row table on every call would cost more than classifying a short text.
_ENGINES: dict[tuple[str | None, int], tuple[tuple[Rule, ...], Engine]] = {}


def _engine(prefer: str | None = None, rules: tuple[Rule, ...] = RULES) -> Engine:
    cached = _ENGINES.get((prefer, id(rules)))
    if cached is None or cached[0] is not rules:
        if len(_ENGINES) >= 8:  # a few tables at most: built-in, built-in + site, a suggestion's
            _ENGINES.clear()
        cached = _ENGINES[(prefer, id(rules))] = (rules, build_engine(rules, prefer))
    return cached[1]


def _table(rules: Sequence[Rule] | None) -> tuple[Rule, ...]:
    """The rules to use: given ones, else the built-in table plus the site rule file
    (classifiers.site_rules; a bad site file is reported there and left out, never fatal)."""
    return tuple(rules) if rules is not None else configured_table(RULES).rules


def _as_bytes(text: str | bytes) -> bytes:
    return text.encode("utf-8", errors="surrogateescape") if isinstance(text, str) else bytes(text)


def _scan_text(text: str | bytes, source: str, engine: Engine, rules: Sequence[Rule] = RULES) -> list[Hit | ProgressHit]:
    progress: list[ProgressHit] = []
    return [*scan_stream(io.BytesIO(_as_bytes(text)), engine, rules, source, progress=progress), *progress]


# Opens one log for reading as a binary stream (the default: open(path, "rb", buffering=0)).
OpenLog = Callable[[Path], BinaryIO]


def _open_plain(path: Path) -> BinaryIO:
    return open(path, "rb", buffering=0)


class LogScan(BaseModel):
    """Hits found in each source, before scheduler facts are weighed (`classify_scanned`).

    Each source's list holds its rule hits and the training-progress analyzer's findings
    (classifiers.progress), so sources concatenated from several scans keep both.
    """

    sources: list[list[Hit | ProgressHit]]
    # The table the hits' rule_index points into; None: the configured one (see `_table`).
    rules: tuple[Rule, ...] | None = None
    # The bounded tail excerpt of each source, read only by the learned fallback (classifiers.learned).
    excerpts: list[Excerpt] = Field(default_factory=list)


def _scan_file(
    path: Path, source: str, engine: Engine, open_log: OpenLog = _open_plain, rules: Sequence[Rule] = RULES
) -> list[Hit | ProgressHit]:
    progress: list[ProgressHit] = []
    try:
        with open_log(path) as stream:
            return [*scan_stream(stream, engine, rules, source, progress=progress), *progress]
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
    learned: bool = True,
    rules: Sequence[Rule] | None = None,
) -> Verdict:
    """Classify one job log given as text (plus optional scheduler facts and kernel lines).

    `rules`: the table to use (default: built-in + site rules, see `_table`)."""
    table = _table(rules)
    eng = _engine(engine, table)
    scans = [_scan_text(text, "log", eng, table)]
    excerpts = [excerpt_of_text(text, "log")]
    if kernel_text is not None:
        scans.append(_scan_text(kernel_text, "kernel", eng, table))
        excerpts.append(excerpt_of_text(kernel_text, "kernel"))
    return classify_scanned(LogScan(sources=scans, excerpts=excerpts, rules=table), facts, learned=learned)


def classify_files(
    paths: Sequence[Path | str],
    facts: SchedulerFacts | None = None,
    kernel_log: Path | str | None = None,
    *,
    engine: str | None = None,
    learned: bool = True,
    rules: Sequence[Rule] | None = None,
) -> Verdict:
    """Classify a job from its log files (e.g. stdout + stderr) as one verdict.

    Raises ClassifyError when a file cannot be read, naming the file.
    """
    scan = scan_logs([*paths, *([] if kernel_log is None else [kernel_log])], engine=engine,
                     sources=[*map(str, paths), *([] if kernel_log is None else ["kernel"])], rules=rules)
    return classify_scanned(scan, facts, learned=learned)


def scan_logs(
    paths: Sequence[Path | str],
    *,
    engine: str | None = None,
    open_log: OpenLog | None = None,
    sources: Sequence[str] | None = None,
    rules: Sequence[Rule] | None = None,
) -> LogScan:
    """Scan every path whole (the slow part); `sources` names them in evidence (default: path).

    `open_log` may return a stream that blocks for more data, e.g. a log still being written.
    Raises ClassifyError when a file cannot be read, naming the file.
    """
    table = _table(rules)
    eng = _engine(engine, table)
    names = list(sources) if sources is not None else [str(p) for p in paths]
    opener = open_log or _open_plain
    sources_hits = [_scan_file(Path(p), name, eng, opener, table) for p, name in zip(paths, names)]
    # One bounded read of each file's tail, for the learned fallback (a live log has ended by now).
    return LogScan(sources=sources_hits, excerpts=[excerpt_of_file(p, name) for p, name in zip(paths, names)],
                   rules=table)


def classify_scanned(scan: LogScan, facts: SchedulerFacts | None = None, *, learned: bool = True) -> Verdict:
    """The verdict from scanned logs plus the scheduler facts.

    Where no rule decides (`unknown`), the learned fallback may name a cause (`learned=False`: never).
    """
    rules = scan.rules if scan.rules is not None else _table(None)
    # Scans joined from several LogScans carry no table: a site row that changed meanwhile must
    # not index past it (built-in rows come first and never move).
    sources = [[h for h in hits if isinstance(h, ProgressHit) or h.rule_index < len(rules)] for hits in scan.sources]
    verdict = decide(candidates_from(sources, rules, fact_hits(facts)))
    return fallback(verdict, scan.excerpts) if learned else verdict


# A templated rule whose `{1}` is any number or name (not a list of values): the hint of last
# resort for a signature no listed value matches.
_OPEN_TEMPLATE = re.compile(r"\[0-9\](\+|\{1,[0-9]+\})|\[A-Z\]\[A-Za-z0-9_\]\*")


def hint_for(signature: str) -> str:
    """The operator hint for a verdict signature ('xid-62' finds its 'xid-{1}' row); '' if unknown.

    A Verdict already carries its hint; this is for callers that only stored the signature.
    """
    from classifiers.scheduler_facts import EXIT_ZERO, SIGNAL_RULES, STATE_RULES

    table = {**rules_by_signature(), **{r.signature: r for r in _table(None)[len(RULES):]}}
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
        if _OPEN_TEMPLATE.search(rule.pattern):
            fallback = rule.hint
    if fallback:
        return fallback
    for fact_rule in (*STATE_RULES.values(), *SIGNAL_RULES.values(), EXIT_ZERO):
        if fact_rule.signature == signature:
            return fact_rule.hint
    from classifiers.progress import HINTS

    return HINTS.get(signature, "")
