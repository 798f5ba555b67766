"""The learned fallback (classifiers.learned): only where no rule decides, only above its threshold,
on a bounded excerpt, and never a crash when its model file is missing or corrupt.

The model is the shipped one (classifiers/learned_model.json, built by scripts/build-learned-model
from the labelled corpora in tests/fixtures/classifiers); the corpora's rows are real excerpts
(see their READMEs for sources).
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from classifiers import classify_files, classify_text, learned
from classifiers.evaluate import evaluate_corpus
from classifiers.learned import (
    CONFIDENCE_CAP,
    EXCERPT_BYTES,
    GUESS_CONFIDENCE_CAP,
    LEAN_FLOOR,
    NEVER_ANSWERS,
    NEVER_THRESHOLD,
    TAIL_BYTES,
    Excerpt,
    excerpt_of_file,
    excerpt_of_text,
    fallback,
    features,
    load_model,
    predict,
)
from pitstop.models import GUESS_SIGNATURE_PREFIX, Alternative, Cause, Evidence, Verdict

REPO = Path(__file__).resolve().parents[2]
CORPORA = REPO / "tests" / "fixtures" / "classifiers"
BUILD = REPO / "scripts" / "build-learned-model"
UNKNOWN = Verdict(cause=Cause.UNKNOWN, signature="no-match", confidence=0.1)


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (CORPORA / name).read_text(encoding="utf-8").splitlines() if line.strip()]


# --- the model file and its build -------------------------------------------------------------


def test_shipped_model_is_trained_on_the_current_corpora_and_never_on_held_out_rounds() -> None:
    script = runpy.run_path(str(BUILD), run_name="test")
    rows = script["training_rows"]()
    # Rounds A-AN are trained on; round AO and every later round stay held out to measure it.
    assert not [r["id"] for r in rows if r["id"].startswith(("harvest.jsonl:AO-", "harvest.jsonl:AP-"))]
    assert any(r["id"].startswith("harvest.jsonl:AN-") for r in rows)
    assert any(r["id"].startswith("harvest.jsonl:AA-") for r in rows)
    model = load_model()
    assert model.trained_on["sha256"] == script["corpus_digest"](rows), (
        "the training corpora changed since learned_model.json was built: run scripts/build-learned-model")
    # The threshold is the lowest one that reached the target precision on held-out folds, or, when
    # none did, the never-answering one (the model then only guesses).
    table = model.measured["thresholds"]
    target, least = model.trained_on["settings"]["target_precision"], script["MIN_ANSWERED"]
    reached = [float(t) for t, row in table.items() if row["precision"] >= target and row["answered"] >= least]
    assert model.threshold == (min(reached) if reached else NEVER_THRESHOLD)


@pytest.mark.slow
@pytest.mark.timeout(900)  # trains six models (five folds and the final one)
def test_shipped_model_equals_a_fresh_build(tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    proc = subprocess.run([sys.executable, str(BUILD), "--check"], capture_output=True, text=True,
                          cwd=REPO, timeout=900)
    assert proc.returncode == 0, proc.stderr


# --- threshold and provenance ------------------------------------------------------------------


def _with_threshold(tmp_path: Path, threshold: float) -> Path:
    """The shipped model with another threshold, written where `fallback` can load it."""
    raw = json.loads(learned.MODEL_PATH.read_text(encoding="utf-8"))
    raw["threshold"] = threshold
    path = tmp_path / f"model-{threshold}.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


def test_answers_exactly_when_the_model_is_sure_enough_and_says_so(tmp_path: Path) -> None:
    # The mechanism at a threshold that splits these rows, whatever threshold the build shipped:
    # at or above it an answer, between the lean floor and it a guess, below the floor unknown.
    path = _with_threshold(tmp_path, 0.8)
    model = load_model(path)
    answered = leaned = abstained = 0
    for row in _rows("dev.jsonl") + [r for r in _rows("harvest.jsonl") if r["id"].startswith("I-")]:
        excerpt = excerpt_of_text(row["text"], "log")
        guess = predict(model, [excerpt])
        verdict = fallback(UNKNOWN, [excerpt], model_path=path)
        nameable = guess.cause not in NEVER_ANSWERS
        error_like = learned._ERROR_LIKE.search(excerpt.tail.lower()) is not None
        if nameable and guess.probability >= model.threshold:
            answered += 1
            assert verdict.cause is guess.cause and verdict.signature == f"learned:{guess.cause.value}"
            assert verdict.confidence <= CONFIDENCE_CAP and "learned fallback" in verdict.decided_by
            shown = {text for _, text in excerpt.lines()}
            assert verdict.evidence and all(e.text in shown for e in verdict.evidence)
        elif nameable and guess.probability >= LEAN_FLOOR and error_like:
            leaned += 1
            assert verdict.cause is guess.cause and verdict.signature == f"{GUESS_SIGNATURE_PREFIX}{guess.cause.value}"
            assert verdict.confidence <= GUESS_CONFIDENCE_CAP < CONFIDENCE_CAP
            assert "below its answering threshold 0.80" in verdict.decided_by and "a guess" in verdict.hint
            assert verdict.cause not in {a.cause for a in verdict.alternatives}
        else:
            abstained += 1
            assert verdict.signature == "no-match" and "abstained" in verdict.decided_by
            # Its guesses ride along as alternatives, likeliest first, never a success.
            named = [(c, p) for c, p in guess.ranked if c not in NEVER_ANSWERS and p >= learned.GUESS_FLOOR]
            assert [a.cause for a in verdict.alternatives] == [c for c, _ in named][: learned.MAX_GUESSES]
            assert all(a.signature == f"learned:{a.cause.value}" and a.confidence <= CONFIDENCE_CAP
                       for a in verdict.alternatives)
    assert answered and leaned and abstained  # every side of both lines is exercised


def test_an_abstaining_guess_is_an_alternative_not_the_cause(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _with_threshold(tmp_path, NEVER_THRESHOLD)
    monkeypatch.setattr(learned, "LEAN_FLOOR", 1.0)  # below the floor: no guess as the cause either
    excerpt = excerpt_of_text("RuntimeError: CUDA error: out of memory; tried to allocate 2.00 GiB on device 0", "log")
    verdict = fallback(UNKNOWN, [excerpt], model_path=path)
    assert verdict.cause is Cause.UNKNOWN and verdict.alternatives
    first = verdict.alternatives[0]
    assert first.cause is Cause.CUDA_OOM and first.signature == "learned:cuda_oom"
    assert "guesses cuda_oom" in first.tells_apart and "out of memory" in first.tells_apart
    assert first.confidence <= CONFIDENCE_CAP
    confidences = [a.confidence for a in verdict.alternatives]
    assert confidences == sorted(confidences, reverse=True)
    # A log with nothing to go on gets no guesses worth naming: at most the floor's few.
    assert all(a.confidence >= round(CONFIDENCE_CAP * learned.GUESS_FLOOR, 3) for a in verdict.alternatives)


def test_a_model_that_never_reached_its_target_only_guesses(tmp_path: Path) -> None:
    path = _with_threshold(tmp_path, NEVER_THRESHOLD)
    line = "RuntimeError: CUDA error: out of memory; tried to allocate 2.00 GiB on device 0"
    excerpt = excerpt_of_text(line, "log")
    assert predict(load_model(path), [excerpt]).probability > LEAN_FLOOR  # a confident guess, still not an answer
    verdict = fallback(UNKNOWN, [excerpt], model_path=path)
    assert verdict.cause is Cause.CUDA_OOM and verdict.signature == f"{GUESS_SIGNATURE_PREFIX}cuda_oom"
    assert "below its answering threshold" in verdict.decided_by and verdict.confidence <= GUESS_CONFIDENCE_CAP


def test_no_lean_on_progress_lines_alone() -> None:
    # One healthy progress line reads as numerical at p > 0.5 to the model; with no error-like line
    # in the log there is nothing to guess a failure from, so the verdict stays unknown.
    excerpt = excerpt_of_text("step 1200 | loss 2.3114 | lr 2.9e-04", "log")
    assert predict(load_model(), [excerpt]).probability >= LEAN_FLOOR
    assert fallback(UNKNOWN, [excerpt]).cause is Cause.UNKNOWN


def test_never_calls_a_job_successful() -> None:
    # Plain training-progress lines are what the corpora's success rows look like.
    text = "".join(f"epoch 3 step {i} | loss 2.{i % 10}1 | lr 3.0e-04 | throughput 812 samples/s\n" for i in range(300))
    verdict = fallback(UNKNOWN, [excerpt_of_text(text, "log")])
    assert verdict.cause is not Cause.SUCCESS


def test_never_applied_when_a_rule_decides_and_only_leans_over_a_weak_catch_all() -> None:
    decided = overruled = 0
    for row in _rows("dev.jsonl") + _rows("harvest.jsonl"):
        rules_only = classify_text(row["text"], learned=False)
        with_fallback = classify_text(row["text"])
        if rules_only.cause is Cause.UNKNOWN:
            assert with_fallback.cause is Cause.UNKNOWN or with_fallback.signature.startswith(
                ("learned:", GUESS_SIGNATURE_PREFIX)), row["id"]
            continue
        weak = (rules_only.cause in learned.OVERRULABLE and rules_only.confidence <= learned.WEAK_RULE_CONFIDENCE
                and not any(a.settled_by for a in rules_only.alternatives))
        if with_fallback == rules_only:
            decided += not weak
            continue
        # Overruled: only a weak catch-all, only as a guess, and the rule stays first among the alternatives.
        assert weak, row["id"]
        overruled += 1
        assert with_fallback.signature == f"{GUESS_SIGNATURE_PREFIX}{with_fallback.cause.value}", row["id"]
        assert with_fallback.cause is not rules_only.cause and with_fallback.confidence <= GUESS_CONFIDENCE_CAP
        first = with_fallback.alternatives[0]
        assert (first.cause, first.signature) == (rules_only.cause, rules_only.signature)
        assert "weak" in with_fallback.decided_by and rules_only.signature in with_fallback.decided_by
    assert decided > 700 and overruled


def _overruled_row() -> tuple[str, Verdict]:
    """A real excerpt whose weak rule verdict the model overrules, with that rules-only verdict."""
    for row in _rows("harvest.jsonl"):
        rules_only = classify_text(row["text"], learned=False)
        if classify_text(row["text"]).signature.startswith(GUESS_SIGNATURE_PREFIX) and rules_only.cause in learned.OVERRULABLE:
            return row["text"], rules_only
    raise AssertionError("no harvest row is overruled")


def test_a_weak_rule_stands_beside_a_scheduler_fact_node_evidence_or_an_xid() -> None:
    text, weak = _overruled_row()
    excerpt = [excerpt_of_text(text, "log")]
    assert fallback(weak, excerpt).signature.startswith(GUESS_SIGNATURE_PREFIX)
    # The same verdict backed by the scheduler's own word, or with an alternative the node's kernel
    # log settles (the post-failure flow gathers it), or naming an Xid: the rule stands.
    scheduler = weak.model_copy(update={"evidence": [*weak.evidence, Evidence(line=0, text="State=FAILED", source="scheduler")]})
    settled = weak.model_copy(update={"alternatives": [Alternative(
        cause=Cause.GPU_HARDWARE, confidence=0.3, tells_apart="an Xid on the node", settled_by="xid")]})
    xid = weak.model_copy(update={"signature": "xid-13"})
    strong = weak.model_copy(update={"confidence": learned.WEAK_RULE_CONFIDENCE + 0.01})
    named = weak.model_copy(update={"cause": Cause.NETWORK_FABRIC})  # not a catch-all cause
    for kept in (scheduler, settled, xid, strong, named):
        assert fallback(kept, excerpt) is kept


def test_a_decided_verdict_passes_through_untouched() -> None:
    oom = classify_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert oom.cause is Cause.CUDA_OOM
    assert fallback(oom, [excerpt_of_text("Killed\nMemoryError\n", "log")]) is oom


# --- bounded input --------------------------------------------------------------------------------


def test_excerpt_is_the_tail_and_the_lines_around_error_like_lines() -> None:
    lines = [f"step {i} ok" for i in range(1, 1001)]
    lines[299] = "RuntimeError: something broke"  # line 300
    chosen = [n for n, _ in excerpt_of_text("\n".join(lines) + "\n", "log").lines()]
    assert chosen == [*range(295, 306), *range(801, 1001)]


def test_bounded_read_on_a_huge_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "huge.log"
    with open(log, "wb") as f:
        f.write(b"FATAL: the first line is never read by the fallback\n")
        f.truncate(3 * 1024**3)  # 3 GiB, sparse: no disk used
        f.seek(0, os.SEEK_END)
        f.write(b"".join(b"worker %d: Error while reading batch, retrying\n" % i for i in range(5000)))
        f.write(b"Bus error (core dumped)\n")
    reads: list[int] = []
    real_pread = os.pread

    def counting_pread(fd: int, n: int, offset: int) -> bytes:
        reads.append(n)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(learned.os, "pread", counting_pread)
    excerpt = excerpt_of_file(log, "huge.log")
    assert sum(reads) <= TAIL_BYTES and len(excerpt.tail) <= TAIL_BYTES
    lines = excerpt.lines()
    assert sum(len(text) + 1 for _, text in lines) <= EXCERPT_BYTES
    assert lines[-1] == (0, "Bus error (core dumped)")  # line numbers unknown in a tail: 0
    assert not any("first line" in text for _, text in lines)


def test_small_file_keeps_line_numbers_and_a_fifo_is_never_opened(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("start\nKilled\n")
    assert excerpt_of_file(log, "job.log").lines() == [(1, "start"), (2, "Killed")]
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert excerpt_of_file(fifo, "pipe").lines() == []  # would block forever if opened for reading
    assert excerpt_of_file(tmp_path / "gone.log", "gone").lines() == []


def test_a_very_long_line_is_cut() -> None:
    lines = excerpt_of_text("x" * 10_000_000 + " error\n", "log").lines()
    assert len(lines) == 1 and len(lines[0][1]) <= 500


# --- normalisation ---------------------------------------------------------------------------------


def test_numbers_hex_paths_and_hosts_are_normalised_to_families() -> None:
    a = features(["node017: fault at 0x7f3a2c001000 in /home/alice/run3/train.py on gpu-a17.cluster.local 10.0.3.7:29500"])
    b = features(["node942: fault at 0xdeadbeef in /scratch/bob/exp/train.py on gpu-b2.site.org 192.168.1.20:1234"])
    assert a == b


# --- missing or corrupt model ----------------------------------------------------------------------


def test_missing_or_corrupt_model_leaves_the_classifier_working(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = json.loads(learned.MODEL_PATH.read_text())
    short = {**good, "intercept": good["intercept"][:-1]}
    nan = {**good, "intercept": [float("nan")] * len(good["intercept"])}
    cases = {
        "missing": tmp_path / "missing.json",
        "corrupt": tmp_path / "garbage.json",
        "wrong shape": tmp_path / "short.json",
        "not a number": tmp_path / "nan.json",
        "truncated": tmp_path / "cut.json",
    }
    cases["corrupt"].write_bytes(b"{\x00not json")
    cases["wrong shape"].write_text(json.dumps(short))
    cases["not a number"].write_text(json.dumps(nan))  # json.dumps writes NaN, json.loads reads it
    cases["truncated"].write_bytes(learned.MODEL_PATH.read_bytes()[:5000])
    log = tmp_path / "job.log"
    log.write_text("launching\nsomething odd happened, giving up\n")
    for what, path in cases.items():
        monkeypatch.setattr(learned, "MODEL_PATH", path)
        verdict = classify_files([log])
        assert verdict.cause is Cause.UNKNOWN, what
        assert "learned fallback unavailable" in verdict.decided_by and str(path) in verdict.decided_by, what
        assert ("missing" if what == "missing" else "corrupt") in verdict.decided_by
        # Rules are untouched by it.
        assert classify_text("torch.OutOfMemoryError: CUDA out of memory.\n").cause is Cause.CUDA_OOM


# --- evaluation by round -----------------------------------------------------------------------------


def test_eval_restricted_to_one_round_with_and_without_the_fallback() -> None:
    held_out = [r for r in _rows("harvest.jsonl") if r["id"].startswith("I-")]
    corpus = CORPORA / "harvest.jsonl"
    with_fallback = evaluate_corpus(corpus, only_ids=["I-"])
    rules_only = evaluate_corpus(corpus, only_ids=["I-"], learned=False)
    assert with_fallback.total == rules_only.total == len(held_out)
    assert {m["id"][:2] for m in with_fallback.mistakes} <= {"I-"}


def test_excerpts_of_several_sources_are_read_together() -> None:
    model = load_model()
    log = excerpt_of_text("launching\n", "log")
    assert predict(model, [log, Excerpt(source="kernel")]) is not None
    assert predict(model, [Excerpt(source="log"), excerpt_of_text("  \n\n", "kernel")]) is None
