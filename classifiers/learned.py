"""Learned fallback: a cause for the logs no rule decides, from a model trained on labelled logs.

Used only where the rules' verdict is `unknown`. It reads a bounded excerpt of each source (the
last lines of its tail and the lines around error-like lines there), never the whole log, and
answers only when the model is surer than a threshold calibrated on held-out folds of its training
corpora (chosen to keep precision high); otherwise the verdict stays `unknown` and says what the
model guessed. Its verdicts say where they came from (signature `learned:<cause>`, `decided_by`),
carry less confidence than any rule, and never call a job a success (that takes a rule or the
scheduler's word).

The model (learned_model.json next to this file) is a multinomial logistic regression over
normalised words, their CamelCase parts and character n-grams: numbers, hex, paths and host names
are reduced first, so it learns families of faults, not one thread's wording.
scripts/build-learned-model trains it (scikit-learn, build time only) from
tests/fixtures/classifiers; inference here is pure Python and loads the file lazily.

    excerpt_of_file(path, source) / excerpt_of_text(text, source) -> Excerpt   (bounded reads)
    Excerpt.lines() -> the lines the model reads (select_lines)
    features(lines) -> dict[str, float]; load_model(path) -> LearnedModel; predict(model, excerpts)
    fallback(verdict, excerpts, model_path=None) -> Verdict
"""

from __future__ import annotations

import bisect
import json
import math
import os
import re
import stat
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pitstop.models import GUESS_SIGNATURE_PREFIX, Alternative, Cause, Evidence, Verdict

from classifiers.ambiguity import MAX_ALTERNATIVES

MODEL_PATH = Path(__file__).with_name("learned_model.json")
MODEL_FORMAT = 1
BUILD_SCRIPT = "scripts/build-learned-model"

# The bounded input: the model never sees more than EXCERPT_BYTES of a source, read from its last
# TAIL_BYTES (one pread for a file, whatever its size).
TAIL_BYTES = 256 * 1024
TAIL_LINES = 200
CONTEXT_LINES = 5
EXCERPT_BYTES = 64 * 1024
LINE_CHARS = 500  # a longer line is cut: one 100 MB line must not become 100 MB of features
_ERROR_LIKE = re.compile(  # matched against lowercased bytes
    rb"error|fatal|killed|exception|traceback|abort|fail|panic|oom|timed? ?out|terminat|segfault|denied")

# The threshold a build writes when no threshold reached its precision target: the model guesses
# (decided_by says what) but never answers.
NEVER_THRESHOLD = 1.0
CONFIDENCE_CAP = 0.4  # below every rule's confidence (rules.py: 0.4 and up)
MAX_EVIDENCE = 3
# An abstaining model's guesses ride on the unknown verdict as ranked alternatives, never as its
# cause: on the harvest rounds it had not seen, such guesses were right about two times in five
# (scripts/replay-first-scores), too seldom to act on, often enough to say where to look first.
MAX_GUESSES = 2
GUESS_FLOOR = 0.15  # a guess less likely than this says nothing
NEVER_ANSWERS = frozenset({Cause.SUCCESS, Cause.UNKNOWN})
# Below its threshold the model may still lean: a verdict that names its cause as a guess (signature
# GUESS_SIGNATURE_PREFIX + cause), which the remediation policy reports and never acts on
# (Policy.guesses). Measured on harvest rounds L-W, each against a model trained only on the rounds
# before it (scripts/replay-first-scores): its best guesses at p >= 0.5 were right 173 times in 222
# (78 %; 11 in 17 where the rules said unknown), while the rules' own verdicts of confidence <= 0.7
# (a bare traceback, a signal, an NCCL system error, plain training progress) were right 12 times
# in 53 (23 %; 205 in 281 above it). So it leans where no rule decided, and over such a weak rule
# of a catch-all cause (OVERRULABLE) when it names another. The figures were fixed before round X
# was scored.
# A lean also needs one error-like line in the excerpt: without one the model reads only progress
# lines (`step 1200 | loss 2.31` alone gives numerical at p=0.82), and on L-X such leans were right
# 4 times in 9, two of the misses healthy runs named as failures; with one, 14 times in 18.
# The floor moved from 0.5 to 0.4 on 2026-12-07, chosen on L-AA (574 rows) before round AB was
# scored: with the error-line guard, the leans changed 20 verdicts at 0.5 (17 right, 1 lost) and 31
# at 0.4 (27 right, 1 lost; the 0.4-0.5 band 10 of 11 right, spread over 7 rounds), while 0.35
# changed 43 (29 right): below 0.4 its guesses are coin flips.
LEAN_FLOOR = 0.4
WEAK_RULE_CONFIDENCE = 0.7
# Only the failure causes the rules fall back to when they see nothing specific (a bare exception,
# a signal) can be overruled: a weak rule naming hardware, the fabric or memory still quotes a line
# that names it (an uncatalogued Xid, an IB device missing), and that stands; so does an Xid the
# catalog blames on the application (its signature is the driver's own record). A weak success
# stands too: a model that reads a healthy loss curve as a failure would page people for nothing.
OVERRULABLE = frozenset({Cause.SOFTWARE_BUG, Cause.CRASH_SIGNAL})
GUESS_CONFIDENCE_CAP = 0.3  # below a learned answer's (CONFIDENCE_CAP)


class LearnedUnavailable(RuntimeError):
    """The model file is missing or unusable; the message says which and how to rebuild it."""


class Excerpt(BaseModel):
    """The last bytes of one source, kept while it is scanned (cheap: one bounded copy or read).

    `lines()` picks what the model reads; it runs only when the fallback does, i.e. when unknown.
    """

    model_config = ConfigDict(frozen=True)

    source: str
    tail: bytes = b""
    whole: bool = Field(True, description="`tail` is the entire source, so line numbers are known")

    def lines(self) -> list[tuple[int, str]]:
        """(1-based line number, or 0 where only a tail was kept; text) in log order."""
        return select_lines(self.tail, self.whole)


# --- bounded excerpt -----------------------------------------------------------------------------


def select_lines(tail: bytes, whole: bool) -> list[tuple[int, str]]:
    """The last TAIL_LINES lines plus CONTEXT_LINES around each error-like line, in log order.

    Unless `whole`, the first (cut) line is dropped and lines are numbered 0. Over EXCERPT_BYTES,
    the lines nearest the end are kept. One regex pass over the ASCII-lowercased bytes (a
    case-insensitive `re` is ten times slower); only the chosen lines are decoded.
    """
    if not whole and b"\n" in tail[:-1]:
        tail = tail[tail.index(b"\n") + 1:]  # cut at the front; a tail that is one cut line stays
    lines = tail.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    chosen = set(range(max(0, len(lines) - TAIL_LINES), len(lines)))
    for match in _ERROR_LIKE.finditer(tail.lower()):
        i = bisect.bisect_right(starts, match.start()) - 1
        chosen.update(range(max(0, i - CONTEXT_LINES), min(len(lines), i + CONTEXT_LINES + 1)))
    kept: list[tuple[int, str]] = []
    budget = EXCERPT_BYTES
    for i in sorted(chosen, reverse=True):
        line = lines[i][: LINE_CHARS * 4].decode("utf-8", "replace").rstrip("\r")[:LINE_CHARS]
        budget -= len(line) + 1
        if budget < 0:
            break
        kept.append((i + 1 if whole else 0, line))
    return kept[::-1]


def excerpt_of_text(text: str | bytes, source: str) -> Excerpt:
    if isinstance(text, str):  # encode only the end of a big string
        whole = len(text) <= TAIL_BYTES
        text = text[-TAIL_BYTES:].encode("utf-8", "surrogateescape")
    else:
        whole = True
    return Excerpt(source=source, tail=bytes(text[-TAIL_BYTES:]), whole=whole and len(text) <= TAIL_BYTES)


def excerpt_of_file(path: Path | str, source: str) -> Excerpt:
    """The excerpt of a regular file's tail (one bounded read); empty for a FIFO, device, or error."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return Excerpt(source=source)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return Excerpt(source=source)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return Excerpt(source=source)
        start = max(0, info.st_size - TAIL_BYTES)
        tail = os.pread(fd, info.st_size - start, start)
    except OSError:
        return Excerpt(source=source)
    finally:
        os.close(fd)
    return Excerpt(source=source, tail=tail, whole=start == 0)


# --- features ------------------------------------------------------------------------------------

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][^\s\\/:'\"(),\[\]]+){2,}[\\/]?")
_HEX = re.compile(r"\b0[xX][0-9A-Fa-f]+\b|\b(?=[0-9A-Fa-f-]*[0-9])(?=[0-9A-Fa-f-]*[A-Fa-f])[0-9A-Fa-f-]{8,}\b")
_IP = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b")
# gpu-node-017.cluster.local, ip-10-0-0-1.ec2.internal: a first label with a digit, then a domain
# (module names such as torch.cuda have no digit there and are kept).
_HOST = re.compile(r"\b[A-Za-z][A-Za-z0-9-]*[0-9][A-Za-z0-9-]*(?:\.[A-Za-z][A-Za-z0-9-]*)+\b")
_WORD = re.compile(r"[A-Za-z0-9_]+")
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_DIGITS = re.compile(r"[0-9]+")


def _path_word(match: re.Match[str]) -> str:
    # A path is its last component (file.py, shm, nvidia0): the directories are one site's layout.
    last = [part for part in re.split(r"[\\/]", match.group(0)) if part]
    return f" zpathz {last[-1] if last else ''} "


def _normalise(line: str) -> str:
    line = _URL.sub(" zurlz ", line)
    line = _IP.sub(" zipz ", line)
    line = _HOST.sub(" zhostz ", line)
    line = _PATH.sub(_path_word, line)
    return _HEX.sub(" zhexz ", line)


_PLACEHOLDERS = frozenset({"zurlz", "zipz", "zhostz", "zpathz", "zhexz"})
CHAR_NGRAMS = (3, 4, 5)
MIN_CHARS_WORD = 4


def _word_features(raw: str) -> tuple[str, ...]:
    """One word: itself (digit runs -> 0), its CamelCase/snake_case parts, its character n-grams.

    The n-grams let `OutOfMemoryError`, `CUDA_ERROR_OUT_OF_MEMORY` and `out of memory` share
    their pieces, so a wording no thread used still lands near its family.
    """
    word = _DIGITS.sub("0", raw.lower())
    out = ["w:" + word]
    parts = [p.lower() for p in _CAMEL.findall(raw) if not p.isdigit()]
    if len(parts) > 1:
        out.extend("p:" + p for p in parts)
    if len(word) >= MIN_CHARS_WORD and word not in _PLACEHOLDERS:
        padded = f"<{word}>"
        out.extend("c:" + padded[i : i + n] for n in CHAR_NGRAMS for i in range(len(padded) - n + 1))
    return tuple(out)


def line_features(lines: Sequence[str]) -> list[list[str]]:
    """The features of each line (`_word_features` of its words).

    The lines are normalised as one string (no pattern crosses a line end), and each distinct
    word is looked at once: logs repeat themselves.
    """
    of_word: dict[str, tuple[str, ...]] = {}
    out: list[list[str]] = []
    for line in _normalise("\n".join(lines)).split("\n"):
        feats: list[str] = []
        for raw in _WORD.findall(line):
            known = of_word.get(raw)
            if known is None:
                known = of_word[raw] = _word_features(raw)
            feats.extend(known)
        out.append(feats)
    return out


def vectorise(per_line: Sequence[Sequence[str]]) -> dict[str, float]:
    """Sublinear term counts (1 + log n), L2-normalised: a repeated line does not drown the rest."""
    counts: dict[str, int] = {}
    for feats in per_line:
        for f in feats:
            counts[f] = counts.get(f, 0) + 1
    values = {f: 1.0 + math.log(n) for f, n in counts.items()}
    norm = math.sqrt(sum(v * v for v in values.values())) or 1.0
    return {f: v / norm for f, v in values.items()}


def features(lines: Sequence[str]) -> dict[str, float]:
    """The feature vector of excerpt lines (what the build script trains on, too)."""
    return vectorise(line_features(lines))


# --- model ---------------------------------------------------------------------------------------


class LearnedModel(BaseModel):
    """What scripts/build-learned-model writes: classes, weights per feature, the threshold."""

    model_config = ConfigDict(allow_inf_nan=False)  # one NaN weight would make every answer NaN

    format: int
    classes: list[Cause]
    intercept: list[float]
    weights: dict[str, list[float]] = Field(description="feature -> one weight per class")
    threshold: float = Field(ge=0.0, le=1.0, description="the least probability it may answer with")
    trained_on: dict = Field(default_factory=dict, description="corpora, rows, their hash")
    measured: dict = Field(default_factory=dict, description="cross-validated figures of the build")

    @model_validator(mode="after")
    def _shapes(self) -> LearnedModel:
        if self.format != MODEL_FORMAT:
            raise ValueError(f"model format {self.format}, this code reads format {MODEL_FORMAT}")
        k = len(self.classes)
        if len(self.intercept) != k or any(len(w) != k for w in self.weights.values()):
            raise ValueError(f"every weight row must have one value per class ({k})")
        return self


@lru_cache(maxsize=2)
def load_model(path: Path = MODEL_PATH) -> LearnedModel:
    """Read and check the model file once per process. Raises LearnedUnavailable."""
    rebuild = f"rebuild it with {BUILD_SCRIPT}"
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise LearnedUnavailable(f"learned fallback unavailable: {path} is missing ({rebuild})") from None
    except OSError as exc:
        raise LearnedUnavailable(f"learned fallback unavailable: cannot read {path}: {exc.strerror or exc}") from None
    try:
        return LearnedModel.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        reason = str(exc).splitlines()[0][:200]
        raise LearnedUnavailable(f"learned fallback unavailable: {path} is corrupt ({reason}; {rebuild})") from None


class Prediction(BaseModel):
    cause: Cause
    probability: float
    runner_up: Cause | None = None
    evidence: list[Evidence] = Field(default_factory=list, description="the lines that weighed most")
    ranked: list[tuple[Cause, float]] = Field(default_factory=list, description="every class, most likely first")


def probabilities(model: LearnedModel, vector: dict[str, float]) -> list[float]:
    scores = list(model.intercept)
    for f, v in vector.items():
        row = model.weights.get(f)
        if row is not None:
            for k, w in enumerate(row):
                scores[k] += v * w
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def predict(model: LearnedModel, excerpts: Sequence[Excerpt]) -> Prediction | None:
    """The model's cause for the excerpts together; None when they hold no text."""
    lines = [(ex.source, number, text) for ex in excerpts for number, text in ex.lines() if text.strip()]
    if not lines:
        return None
    per_line = line_features([text for _, _, text in lines])
    vector = vectorise(per_line)
    probs = probabilities(model, vector)
    order = sorted(range(len(probs)), key=lambda k: (-probs[k], model.classes[k].value))
    best = order[0]
    # A line weighs what its features add to the winner over the mean class (a feature shared by
    # several lines is split between them).
    k = len(model.classes)
    line_sets = [set(feats) for feats in per_line]
    seen_in: dict[str, int] = {}
    for feats in line_sets:
        for f in feats:
            seen_in[f] = seen_in.get(f, 0) + 1
    lift: dict[str, float] = {}
    for f, n in seen_in.items():
        row = model.weights.get(f)
        if row is not None:
            lift[f] = vector[f] * (row[best] - sum(row) / k) / n
    weight = [sum(lift.get(f, 0.0) for f in feats) for feats in line_sets]
    top_lines = sorted((i for i in range(len(lines)) if weight[i] > 0), key=lambda i: (-weight[i], i))[:MAX_EVIDENCE]
    evidence = [Evidence(line=lines[i][1], text=lines[i][2], source=lines[i][0]) for i in sorted(top_lines)]
    return Prediction(cause=model.classes[best], probability=probs[best],
                      runner_up=model.classes[order[1]] if len(order) > 1 else None, evidence=evidence,
                      ranked=[(model.classes[k], probs[k]) for k in order])


def _guesses(guess: Prediction) -> list[Alternative]:
    """The model's likeliest causes it may name, as alternatives of an unknown verdict."""
    # The weightiest line backs the model's top cause only (Prediction.evidence); quote it there.
    top_line = guess.evidence[0].text[:160] if guess.evidence else ""
    out = []
    for cause, p in guess.ranked:  # most likely first
        if p < GUESS_FLOOR or len(out) == MAX_GUESSES:
            break
        if cause in NEVER_ANSWERS:
            continue
        why = f"no rule matched; the learned model guesses {cause.value} at p={p:.2f}, too unsure to answer"
        if cause is guess.cause and top_line:
            why += f"; the line that weighed most: {top_line}"
        out.append(Alternative(cause=cause, confidence=round(CONFIDENCE_CAP * p, 3),
                               signature=f"learned:{cause.value}", tells_apart=why))
    return out


def _weak(verdict: Verdict) -> bool:
    """A rule's verdict too weak to stand against the model: a catch-all cause at low confidence, no
    scheduler fact, and no alternative that the node's own evidence settles (the post-failure flow
    gathers it: an Xid in the node's kernel log is a finding, the model's lean is not)."""
    return (verdict.cause in OVERRULABLE and verdict.confidence <= WEAK_RULE_CONFIDENCE
            and not verdict.signature.startswith(("learned:", GUESS_SIGNATURE_PREFIX, "xid-"))  # the driver's word
            and not any(e.source == "scheduler" for e in verdict.evidence)
            and not any(a.settled_by for a in verdict.alternatives))


def _lean(guess: Prediction, verdict: Verdict, why: str, threshold: float) -> Verdict:
    """The model's guess as the verdict's cause, marked a guess; a weak rule it overrules stays first
    among the alternatives, on the model's own scale."""
    p_of = dict(guess.ranked)
    overruled = []
    if verdict.cause is not Cause.UNKNOWN:
        quoted = verdict.evidence[0].text[:160] if verdict.evidence else ""
        overruled = [Alternative(
            cause=verdict.cause, confidence=round(GUESS_CONFIDENCE_CAP * p_of.get(verdict.cause, 0.0), 3),
            signature=verdict.signature,
            tells_apart=(f"the rule {verdict.signature} matched ({quoted}), but rule verdicts this weak "
                         f"(confidence {verdict.confidence:.2f}) were right about one time in four on logs not seen "
                         f"before; read both evidence lines"))]
    others = [a for a in _guesses(guess) if a.cause is not guess.cause and a.cause is not verdict.cause]
    return _learned_verdict(
        guess, verdict, GUESS_SIGNATURE_PREFIX, GUESS_CONFIDENCE_CAP,
        hint=(f"a guess, not a finding: {why}; a model trained on labelled failure logs leans to "
              f"{guess.cause.value}. Pitstop reports it and does not act on it: read the evidence lines"),
        decided_by=(f"learned guess ({why}): p={guess.probability:.2f}, at least its lean floor {LEAN_FLOOR:.2f}"
                    + (f" but below its answering threshold {threshold:.2f}" if guess.probability < threshold else "")),
        alternatives=[*overruled, *verdict.alternatives, *others][:MAX_ALTERNATIVES])


def _learned_verdict(guess: Prediction, verdict: Verdict, prefix: str, cap: float, *, hint: str, decided_by: str,
                     alternatives: Sequence[Alternative] = ()) -> Verdict:
    """The model's cause as the verdict: its weightiest lines first, confidence below `cap`."""
    return Verdict(
        cause=guess.cause,
        signature=f"{prefix}{guess.cause.value}",
        confidence=round(cap * guess.probability, 3),
        evidence=[*guess.evidence, *verdict.evidence][: MAX_EVIDENCE + 2],
        hint=hint,
        alternatives=list(alternatives),
        decided_by=f"{decided_by}; next most likely {guess.runner_up.value if guess.runner_up else '-'}",
    )


def fallback(verdict: Verdict, excerpts: Sequence[Excerpt], model_path: Path | None = None) -> Verdict:
    """`verdict` unchanged unless no rule decided (unknown) or only a weak one did, and the model is
    sure enough to answer (unknown only) or to lean (a guess); never raises."""
    weak = _weak(verdict)
    if (verdict.cause is not Cause.UNKNOWN and not weak) or not any(ex.tail for ex in excerpts):
        return verdict
    try:
        model = load_model(model_path or MODEL_PATH)
    except LearnedUnavailable as exc:
        return verdict if weak else verdict.model_copy(update={"decided_by": verdict.decided_by or str(exc)})
    guess = predict(model, excerpts)
    if guess is None:
        return verdict
    leans = (guess.cause not in NEVER_ANSWERS and guess.probability >= LEAN_FLOOR
             and any(_ERROR_LIKE.search(ex.tail.lower()) for ex in excerpts))
    if weak:
        if not leans or guess.cause is verdict.cause:
            return verdict
        return _lean(guess, verdict, f"only a weak rule matched: {verdict.signature}", model.threshold)
    said = None  # why it abstains, if it does
    if guess.cause in NEVER_ANSWERS:
        said = f"learned fallback abstained: its best guess is {guess.cause.value}, which it never answers"
    elif model.threshold >= NEVER_THRESHOLD:
        said = (f"learned fallback abstained: its best guess is {guess.cause.value} at p={guess.probability:.2f}, "
                f"but the model never reached its precision target on held-out folds, so it only guesses")
    elif guess.probability < model.threshold:
        said = (f"learned fallback abstained: its best guess, {guess.cause.value} at "
                f"p={guess.probability:.2f}, is below its threshold {model.threshold:.2f}")
    if said and leans:
        return _lean(guess, verdict, "no rule matched", model.threshold)
    if said:
        return verdict.model_copy(update={"decided_by": verdict.decided_by or said,
                                          "alternatives": [*verdict.alternatives, *_guesses(guess)][:MAX_ALTERNATIVES]})
    return _learned_verdict(
        guess, verdict, "learned:", CONFIDENCE_CAP,
        hint=(f"no rule matched; a model trained on labelled failure logs says {guess.cause.value}: "
              f"read the evidence lines to confirm before acting"),
        decided_by=f"learned fallback (no rule decided): p={guess.probability:.2f} >= threshold {model.threshold:.2f}")
