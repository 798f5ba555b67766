"""Propose site rules from the incidents operators corrected (`pitstop rules suggest`). Pure: texts
and a scoring function in, proposals out; no I/O.

For each corrected cause, the mis-classified incidents' lines are cut into tokens, with numbers,
hex and deep paths generalised into classes (`gpu017` -> `gpu[0-9]+`), and every short run of
tokens is a candidate pattern. A candidate is kept when it matches as many of those incidents as
possible and nothing labelled otherwise: not the site's other labelled incidents, not the shipped
corpora's rows of other causes. Of those, the shortest wins (the most general wording that is
still distinctive). Each proposal is then proved by re-scoring: the incidents it fixes, and every
labelled incident or corpus row it would break, with the rule added to the current table.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache

from pydantic import BaseModel, Field

from pitstop.models import Cause, Verdict

from classifiers.evaluate import Example
from classifiers.rule_model import Rule
from classifiers.site_rules import MAX_SITE_PRIORITY, SiteRule, check_pattern

# Scores one example with a rule table (the CLI passes classify_text with `rules=`).
Predict = Callable[[Example, tuple[Rule, ...]], Verdict]

MAX_TOKENS = 13  # a window of at most this many tokens (spaces count): a phrase, not a line
MIN_LETTERS = 10  # literal letters a pattern needs to be distinctive rather than a common word
MAX_LINE_CHARS = 400
MAX_LINES = 400  # per example: the end of the excerpt, where the cause is
MAX_PER_CAUSE = 3
SHORTLIST = 40
MAX_EXAMINED = 2000  # candidate patterns tried per proposal: bounds the time on long excerpts

_TOKEN = re.compile(
    r"(?P<hex>0x[0-9a-fA-F]+)"
    r"|(?P<hexrun>(?<![0-9A-Za-z])(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}(?![0-9A-Za-z]))"
    r"|(?P<path>/[\w.~+@-]+(?:/[\w.~+@-]+){2,}/?)"
    r"|(?P<num>[0-9]+)"
    r"|(?P<word>[A-Za-z_]+)"
    r"|(?P<space>[ \t]+)"
    r"|(?P<punct>.)"
)
# Classes as they appear in a pattern (the portable subset: no \s, negated classes as [^\n...]).
_CLASS = {"hex": "0x[0-9a-f]+", "hexrun": "[0-9a-f]+", "num": "[0-9]+", "space": "[ \\t]+"}
_PATH_REST = "[^\\n \\t:'\"(),]*"
_CLASS_FRAGMENTS = {_CLASS["hex"], _CLASS["hexrun"], _CLASS["num"]}


def tokens(line: str) -> list[tuple[str, int, bool]]:
    """(pattern fragment, literal letters it carries, is a space) per token of `line`."""
    out: list[tuple[str, int, bool]] = []
    for m in _TOKEN.finditer(line):
        kind, text = m.lastgroup, m.group()
        if kind == "path":  # keep the top directory (/dev, /home, /opt): it says what kind of path
            top = text[: text.index("/", 1) + 1]
            out.append((re.escape(top) + _PATH_REST, sum(c.isalpha() for c in top), False))
        elif kind in _CLASS:
            out.append((_CLASS[kind], 0, kind == "space"))
        elif kind == "word":
            out.append((re.escape(text.lower()), len(text), False))
        else:
            out.append((re.escape(text), 0, False))
    return out


def windows(line: str) -> dict[str, int]:
    """Candidate patterns in one line -> literal letters each carries."""
    return _windows_of(tuple(tokens(line[:MAX_LINE_CHARS])))


@lru_cache(maxsize=4096)
def _windows_of(toks: tuple[tuple[str, int, bool], ...]) -> dict[str, int]:
    # Cached by the generalised line: progress lines that differ only in numbers are one entry.
    found: dict[str, int] = {}
    for start, (_, _, space) in enumerate(toks):
        if space:
            continue
        letters, longest, terms, pattern = 0, 0, 0, ""
        for end in range(start, min(start + MAX_TOKENS, len(toks))):
            fragment, count, is_space = toks[end]
            pattern += fragment
            letters += count
            longest = max(longest, count)
            terms += 1 if count or fragment in _CLASS_FRAGMENTS else 0
            # A phrase (two terms or more), not one word: one word is too easily said elsewhere.
            if not is_space and terms >= 2 and letters >= MIN_LETTERS and longest >= 4:
                found.setdefault(pattern, letters)
    return found


def _lines(ex: Example) -> list[str]:
    text = (ex.text or "") + ("\n" + ex.kernel if ex.kernel else "")
    return [line for line in text.splitlines() if line.strip()][-MAX_LINES:]


class Outcome(BaseModel):
    id: str
    label: Cause
    before: Cause
    after: Cause


class Suggestion(BaseModel):
    rule: SiteRule
    matches: list[str] = Field(description="mis-classified incidents of this cause the pattern matches")
    fixes: list[str] = Field(description="labelled incidents wrong now and right with the rule")
    breaks: list[Outcome] = Field(description="labelled incidents or corpus rows right now and wrong with it")
    also_fixes: list[str] = Field(default_factory=list, description="corpus rows wrong now and right with it")
    also_matches: list[str] = Field(default_factory=list, description=(
        "incidents or corpus rows of other causes the pattern matches (none, when any pattern avoids them all); "
        "`breaks` says which of them it changes"))
    sample: str = Field(description="a line the pattern matches")


class Unfixed(BaseModel):
    id: str
    label: Cause
    predicted: Cause
    why: str


class SuggestReport(BaseModel):
    labelled: int
    wrong: int
    suggestions: list[Suggestion] = Field(default_factory=list)
    unfixed: list[Unfixed] = Field(default_factory=list)


def _right(ex: Example, cause: Cause) -> bool:
    return cause is ex.label or cause in ex.accept


def _band(cause: Cause, builtin: Sequence[Rule]) -> int:
    """The median priority of the built-in rows of this cause: a site row starts in its cause's
    band (classifiers/rules.py), not at the deliberate exceptions above it."""
    priorities = sorted(r.priority for r in builtin if r.cause is cause)
    return min(priorities[len(priorities) // 2] if priorities else 50, MAX_SITE_PRIORITY)


def _name(cause: Cause, pattern: str, taken: set[str]) -> str:
    words = [w for w in re.findall(r"[a-z]{3,}", re.sub(r"\[[^\]]*\]", " ", pattern)) if w not in {"site"}][:4]
    base = "site-" + "-".join([cause.value.replace("_", "-"), *words])[:60].rstrip("-")
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name


def _best_pattern(targets: Sequence[Example], negatives: dict[str, str], positives: Sequence[str] = ()
                  ) -> tuple[str, set[str], str, list[str]] | None:
    """The pattern matching the most targets and the fewest negative texts (none, when one does);
    (pattern, ids of the targets, a line it matches, ids of the negative texts it matches).

    Among the first SHORTLIST such patterns, the one that also matches the most `positives`
    (corpus rows of the same cause: the cause's own vocabulary) wins, then the shortest. A pattern
    that matches a negative text may still change nothing there (a stronger rule decides it):
    re-scoring (`_prove`) tells."""
    support: dict[str, set[str]] = {}
    letters: dict[str, int] = {}
    sample: dict[str, str] = {}
    for ex in targets:
        shapes = {tuple(tokens(line[:MAX_LINE_CHARS])): line for line in reversed(_lines(ex))}
        for shape, line in shapes.items():
            for pattern, count in _windows_of(shape).items():
                support.setdefault(pattern, set()).add(ex.id)
                letters[pattern] = count
                sample.setdefault(pattern, line)
    if not support:
        return None
    joined = "\n".join(negatives.values())
    top = max(len(ids) for ids in support.values())
    ranked = sorted((p for p in support if len(support[p]) == top), key=lambda p: (len(p), -letters[p], p))
    shortlist: list[tuple[int, int, int, str, list[str]]] = []  # (negatives matched, -positives, rank, pattern, ids)
    clean = 0
    for rank, pattern in enumerate(ranked[:MAX_EXAMINED]):
        try:
            check_pattern(pattern)
        except ValueError:
            continue
        regex = re.compile(pattern, re.IGNORECASE | re.MULTILINE)
        hits = [i for i, text in negatives.items() if regex.search(text)] if regex.search(joined) else []
        clean += not hits
        shortlist.append((len(hits), -sum(1 for text in positives if regex.search(text)), rank, pattern, hits))
        if clean >= SHORTLIST:
            break
    if not shortlist:
        return None
    _, _, _, pattern, hits = min(shortlist)
    return pattern, support[pattern], sample[pattern][:MAX_LINE_CHARS], hits


def suggest_rules(
    labelled: Sequence[Example],
    corpus: Sequence[Example],
    table: tuple[Rule, ...],
    builtin: Sequence[Rule],
    predict: Predict,
    notes: dict[str, str] | None = None,
    max_per_cause: int = MAX_PER_CAUSE,
) -> SuggestReport:
    """Proposals for the labelled incidents the `table` (built-in + current site rows) gets wrong."""
    before = {ex.id: predict(ex, table) for ex in labelled}
    wrong = [ex for ex in labelled if not _right(ex, before[ex.id].cause)]
    report = SuggestReport(labelled=len(labelled), wrong=len(wrong))
    if not wrong:
        return report
    corpus_before = {ex.id: predict(ex, table).cause for ex in corpus}
    taken = {r.signature for r in table}
    for cause in sorted({ex.label for ex in wrong}, key=lambda c: c.value):
        pending = [ex for ex in wrong if ex.label is cause]
        negatives = {ex.id: "\n".join(t for t in (ex.text, ex.kernel) if t)
                     for ex in [*labelled, *corpus] if not _right(ex, cause)}
        positives = [ex.text or "" for ex in corpus if _right(ex, cause)]
        for _ in range(max_per_cause):
            if not pending:
                break
            found = _best_pattern(pending, negatives, positives)
            if found is None:
                break
            pattern, matched, sample, elsewhere = found
            suggestion = _prove(cause, pattern, sample, [ex for ex in pending if ex.id in matched], labelled,
                                corpus, before, corpus_before, table, builtin, predict, taken, notes or {})
            suggestion.also_matches = elsewhere
            taken.add(suggestion.rule.name)
            report.suggestions.append(suggestion)
            pending = [ex for ex in pending if ex.id not in matched]
        for ex in pending:
            report.unfixed.append(Unfixed(
                id=ex.id, label=ex.label, predicted=before[ex.id].cause,
                why="no line of it is shared with the others of its cause yet absent from every other cause "
                    "(its excerpt may hold only what the other causes say too)"))
    return report


def _prove(cause, pattern, sample, matched, labelled, corpus, before, corpus_before, table, builtin, predict,
           taken, notes) -> Suggestion:
    """The rule at the lowest priority of its cause's band (or above, up to the cap) that fixes
    the most of `matched`, and what it changes everywhere else."""
    ids = [ex.id for ex in matched]
    note_text = next((notes[i] for i in ids if notes.get(i)), "")
    hint = note_text or f"site rule for {cause.value} (pitstop rules suggest, from {', '.join(ids[:5])})"
    name = _name(cause, pattern, taken)

    def rule_at(priority: int) -> SiteRule:
        return SiteRule(name=name, cause=cause, pattern=pattern, priority=priority, hint=hint[:300],
                        confidence=0.8, note=f"suggested from {', '.join(ids[:10])}")

    band = _band(cause, builtin)
    best, best_fixed = rule_at(band), -1
    for priority in sorted({band, *range(band, MAX_SITE_PRIORITY + 1, 5), MAX_SITE_PRIORITY}):
        candidate = rule_at(priority)
        extended = (*table, candidate.to_rule())
        fixed = sum(1 for ex in matched if _right(ex, predict(ex, extended).cause))
        if fixed > best_fixed:
            best, best_fixed = candidate, fixed
        if fixed == len(matched):
            break
    extended = (*table, best.to_rule())
    fixes: list[str] = []
    breaks: list[Outcome] = []
    for ex in labelled:
        after = predict(ex, extended).cause
        was = before[ex.id].cause
        if not _right(ex, was) and _right(ex, after):
            fixes.append(ex.id)
        elif _right(ex, was) and not _right(ex, after):
            breaks.append(Outcome(id=ex.id, label=ex.label, before=was, after=after))
    also: list[str] = []
    for ex in corpus:
        after = predict(ex, extended).cause
        was = corpus_before[ex.id]
        if _right(ex, was) and not _right(ex, after):
            breaks.append(Outcome(id=ex.id, label=ex.label, before=was, after=after))
        elif not _right(ex, was) and _right(ex, after):
            also.append(ex.id)
    return Suggestion(rule=best, matches=ids, fixes=fixes, breaks=breaks, also_fixes=also, sample=sample)
