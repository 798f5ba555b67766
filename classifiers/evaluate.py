"""Evaluate the classifier on a labelled JSONL corpus: per-cause P/R/F1, macro-F1, accuracy, confusion.

Corpus rows: {"text": ..., "label": ...} or {"path": ..., "label": ...} (paths relative to the
corpus file). Optional "state", "exit_code", "signal" and "kernel" fields become scheduler facts
and kernel text; optional "accept": [causes] lists other causes that also count as right;
"ambiguous": true marks rows where an expert could defend another label — the report scores them
like any other row and also gives the figures without them, so a disputed label is visible, not
hidden. `score()` is pure; `load_corpus()` and `evaluate_corpus()` do the reading.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from pitstop.models import Cause, SchedulerFacts


# Harvest rounds in the order they were gathered (E and F on one day); after Z they are named AA,
# AB, ... A row's id starts with its round's name (`AH-storage_io-c01`).
ROUND_ORDER = tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ") + tuple(f"A{c}" for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def rounds_before(round_name: str) -> frozenset[str]:
    """Every harvest round gathered before `round_name`."""
    return frozenset(ROUND_ORDER[: ROUND_ORDER.index(round_name)])


class CorpusError(ValueError):
    """The corpus file is unusable; the message names the file and line."""


class Example(BaseModel):
    id: str
    label: Cause
    text: str | None = None
    path: Path | None = None
    facts: SchedulerFacts | None = None
    kernel: str | None = None
    accept: list[Cause] = Field(default_factory=list, description="other causes that count as right")
    ambiguous: bool = False


class CauseScore(BaseModel):
    cause: Cause
    precision: float
    recall: float
    f1: float
    support: int
    predicted: int


class Report(BaseModel):
    total: int
    accuracy: float
    macro_f1: float
    per_cause: list[CauseScore]
    confusion: dict[str, dict[str, int]] = Field(description="true label -> predicted -> count")
    mistakes: list[dict] = Field(default_factory=list)
    unambiguous: Report | None = Field(None, description="the same metrics without rows marked ambiguous")


def load_corpus(corpus: Path) -> list[Example]:
    try:
        raw_lines = corpus.read_bytes().splitlines()
    except OSError as exc:
        raise CorpusError(f"cannot read corpus {corpus}: {exc.strerror or exc}") from exc
    examples: list[Example] = []
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
            label = Cause(row["label"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CorpusError(f"{corpus}:{number}: need a JSON object with a valid 'label' ({exc})") from exc
        if "text" not in row and "path" not in row:
            raise CorpusError(f"{corpus}:{number}: row has neither 'text' nor 'path'")
        facts = None
        if any(k in row for k in ("state", "exit_code", "signal")):
            facts = SchedulerFacts(state=row.get("state"), exit_code=row.get("exit_code"), signal=row.get("signal"))
        examples.append(
            Example(
                id=str(row.get("id", number)), label=label, text=row.get("text"),
                path=(corpus.parent / row["path"]) if "path" in row else None,
                facts=facts, kernel=row.get("kernel"), accept=row.get("accept") or [],
                ambiguous=bool(row.get("ambiguous", False)),
            )
        )
    return examples


def score(
    pairs: Iterable[tuple[Cause, Cause]],
    ids: Sequence[str] | None = None,
    ambiguous: Sequence[bool] | None = None,
) -> Report:
    """Metrics from (true, predicted) pairs. Causes with neither support nor predictions are left out.

    With `ambiguous` flags (one per pair), mistakes say which rows were disputed and the report
    carries a second, nested one computed without those rows.
    """
    pairs = list(pairs)
    confusion: dict[str, Counter] = {}
    for truth, predicted in pairs:
        confusion.setdefault(truth.value, Counter())[predicted.value] += 1
    seen = {c for pair in pairs for c in pair}
    per_cause: list[CauseScore] = []
    for cause in (c for c in Cause if c in seen):
        tp = sum(1 for t, p in pairs if t is cause and p is cause)
        support = sum(1 for t, _ in pairs if t is cause)
        predicted = sum(1 for _, p in pairs if p is cause)
        precision = tp / predicted if predicted else 0.0
        recall = tp / support if support else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_cause.append(CauseScore(cause=cause, precision=precision, recall=recall, f1=f1,
                                    support=support, predicted=predicted))
    labelled = [s for s in per_cause if s.support]
    flags = list(ambiguous) if ambiguous is not None else [False] * len(pairs)
    mistakes = []
    if ids is not None:
        mistakes = [
            {"id": i, "label": t.value, "predicted": p.value, "ambiguous": a}
            for i, (t, p), a in zip(ids, pairs, flags) if t is not p
        ]
    unambiguous = None
    if any(flags):
        kept = [(pair, i) for pair, i, a in zip(pairs, ids or [""] * len(pairs), flags) if not a]
        unambiguous = score([pair for pair, _ in kept], [i for _, i in kept] if ids is not None else None)
    return Report(
        total=len(pairs),
        accuracy=sum(1 for t, p in pairs if t is p) / len(pairs) if pairs else 0.0,
        macro_f1=sum(s.f1 for s in labelled) / len(labelled) if labelled else 0.0,
        per_cause=per_cause,
        confusion={k: dict(v) for k, v in confusion.items()},
        mistakes=mistakes,
        unambiguous=unambiguous,
    )


def evaluate_corpus(corpus: Path, engine: str | None = None, only_ids: Sequence[str] = (),
                    learned: bool = True) -> Report:
    """`only_ids`: score only rows whose id starts with one of these (e.g. one harvest round, 'I-')."""
    examples = load_corpus(corpus)
    if only_ids:
        examples = [ex for ex in examples if ex.id.startswith(tuple(only_ids))]
    return evaluate_examples(examples, engine=engine, learned=learned)


def evaluate_examples(examples: Sequence[Example], engine: str | None = None, rules: Sequence | None = None,
                      learned: bool = True) -> Report:
    """Score examples from any source (a corpus, the site's labelled incidents); `rules`: the
    rule table to score (default: built-in + site rules); `learned=False`: rules only, no learned fallback."""
    from classifiers import ClassifyError, classify_files, classify_text

    pairs: list[tuple[Cause, Cause]] = []
    for ex in examples:
        try:
            if ex.path is not None:
                verdict = classify_files([ex.path], ex.facts, engine=engine, rules=rules, learned=learned)
            else:
                verdict = classify_text(ex.text or "", ex.facts, ex.kernel, engine=engine, rules=rules, learned=learned)
            # A corpus whose classes are coarser than ours may accept more than one of our causes.
            truth = verdict.cause if verdict.cause in ex.accept else ex.label
            pairs.append((truth, verdict.cause))
        except ClassifyError:
            pairs.append((ex.label, Cause.UNKNOWN))
    return score(pairs, [ex.id for ex in examples], [ex.ambiguous for ex in examples])
