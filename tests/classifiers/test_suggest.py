"""Rule suggestion (classifiers.suggest): patterns generalise, avoid other causes' lines, and every
proposal is proved by re-scoring, breaks included.

Log lines copy real formats: Apptainer/Singularity on a node without the job owner's account
(apptainer/singularity#5757), srun's task exit line (Slurm srun(1)), a Python traceback, and
Nextflow's process failure report (nf-core/circrna#116: "Caused by: / Process exceeded running
time limit (16h)").
"""

from __future__ import annotations

import re

from classifiers import classify_text
from classifiers.evaluate import Example
from classifiers.rules import RULES
from classifiers.suggest import suggest_rules, tokens, windows
from pitstop.models import Cause


def _apptainer(uid: int, node: str) -> str:
    return (
        "+ srun singularity exec /shared/img/pytorch-24.03.sif python train.py\n"
        f"WARNING: Could not lookup the current user's information: user: unknown userid {uid}\n"
        f"FATAL:   Couldn't determine user account information: user: unknown userid {uid}\n"
        f"srun: error: {node}: task 0: Exited with exit code 255\n"
    )


def _predict(ex: Example, rules):
    return classify_text(ex.text or "", ex.facts, ex.kernel, rules=rules)


def test_tokens_generalise_numbers_hex_and_deep_paths() -> None:
    pattern = "".join(t[0] for t in tokens("gpu017 at 0x7f3a9c fault in /home/alice/run/train.py id 9f86d081884c7d65"))
    assert pattern.startswith(r"gpu[0-9]+[ \t]+at[ \t]+0x[0-9a-f]+[ \t]+fault")
    assert "/home/[^\\n" in pattern and "alice" not in pattern
    assert pattern.endswith(r"id[ \t]+[0-9a-f]+")
    assert all(re.search(p, "gpu017 at 0x7f3a9c", re.I) for p in windows("gpu017 at 0x7f3a9c"))
    # Short paths say what they are (/dev/shm): kept literal.
    assert "dev" in "".join(t[0] for t in tokens("/dev/shm is full"))
    # Every window is a phrase: one word alone is never proposed.
    assert not any(re.fullmatch(r"[a-z]+", p) for p in windows("Preempting"))


def test_one_rule_covers_incidents_that_differ_in_numbers_and_hosts() -> None:
    labelled = [
        Example(id="incident 1", label=Cause.ENVIRONMENT, text=_apptainer(41021, "gpu017")),
        Example(id="incident 2", label=Cause.ENVIRONMENT, text=_apptainer(50213, "gpu122")),
        Example(id="incident 3", label=Cause.SOFTWARE_BUG,
                text="Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"
                     "ValueError: expected 4 dims\nsrun: error: gpu017: task 0: Exited with exit code 1\n"),
    ]
    assert all(_predict(ex, RULES).cause is not Cause.ENVIRONMENT for ex in labelled[:2]), \
        "the built-in rules now know this wording: pick another site-specific excerpt"
    report = suggest_rules(labelled, [], RULES, RULES, _predict, notes={"incident 1": "fix sssd on the node"})
    (suggestion,) = report.suggestions
    rule = suggestion.rule
    assert rule.cause is Cause.ENVIRONMENT and rule.name.startswith("site-environment")
    assert sorted(suggestion.fixes) == ["incident 1", "incident 2"] and suggestion.breaks == []
    assert not re.search(r"41021|50213|gpu017|gpu122", rule.pattern)  # generalised, not one incident's
    assert not re.search(rule.pattern, labelled[2].text, re.I)  # absent from the other cause's incident
    assert rule.hint == "fix sssd on the node"
    assert 1 <= rule.priority <= 100


def test_a_rule_that_would_flip_another_cause_says_so() -> None:
    shared = _apptainer(551, "gpu003")
    labelled = [
        Example(id="incident 1", label=Cause.ENVIRONMENT, text=shared),
        # The same lines, plus a traceback the operator says is the real cause.
        Example(id="incident 2", label=Cause.SOFTWARE_BUG,
                text=shared + "Traceback (most recent call last):\nKeyError: 'model.layers.0'\n"),
    ]
    before = _predict(labelled[1], RULES).cause
    assert before is Cause.SOFTWARE_BUG, "precondition: the built-ins call the traceback a software bug"
    report = suggest_rules(labelled, [], RULES, RULES, _predict)
    (suggestion,) = report.suggestions
    assert suggestion.fixes == ["incident 1"]
    assert [(b.id, b.before, b.after) for b in suggestion.breaks] == [
        ("incident 2", Cause.SOFTWARE_BUG, Cause.ENVIRONMENT)]


def test_corpus_rows_of_other_causes_are_not_matched_and_are_rescored() -> None:
    text = ("ERROR ~ Error executing process > 'PIPE:TRAIN_SHARD (7)'\n\nCaused by:\n"
            "  Process exceeded running time limit (4h)\n\nCommand exit status:\n  -\n")
    labelled = [Example(id="incident 9", label=Cause.TIME_LIMIT, text=text)]
    corpus = [Example(id="c:1", label=Cause.SOFTWARE_BUG,
                      text="ERROR ~ Error executing process > 'PIPE:ALIGN (1)'\n\nCaused by:\n"
                           "  Process `PIPE:ALIGN (1)` terminated with an error exit status (1)\n")]
    if _predict(labelled[0], RULES).cause is Cause.TIME_LIMIT:
        report = suggest_rules(labelled, corpus, RULES, RULES, _predict)
        assert report.wrong == 0 and report.suggestions == []  # nothing to fix: nothing proposed
        return
    report = suggest_rules(labelled, corpus, RULES, RULES, _predict)
    (suggestion,) = report.suggestions
    assert "error executing process" not in suggestion.rule.pattern.lower()  # shared with the corpus row
    assert re.search(suggestion.rule.pattern, text, re.I) and suggestion.fixes == ["incident 9"]
    assert suggestion.breaks == []


def test_nothing_wrong_nothing_proposed_and_unfixable_is_explained() -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    right = [Example(id="incident 1", label=Cause.CUDA_OOM, text=oom)]
    assert suggest_rules(right, [], RULES, RULES, _predict).suggestions == []
    # Two incidents with the same text but different labels: no line tells them apart.
    clash = [Example(id="incident 1", label=Cause.ENVIRONMENT, text="the training job ended early\n"),
             Example(id="incident 2", label=Cause.STORAGE_IO, text="the training job ended early\n")]
    report = suggest_rules(clash, [], RULES, RULES, _predict)
    # Whatever is proposed says it matches the other incident too, and fixes nothing there.
    assert {s.rule.cause for s in report.suggestions} <= {Cause.ENVIRONMENT, Cause.STORAGE_IO}
    for s in report.suggestions:
        assert s.also_matches and s.breaks == []
    none_at_all = [Example(id="incident 3", label=Cause.ENVIRONMENT, text="ok\n")]
    report = suggest_rules(none_at_all, [], RULES, RULES, _predict)
    assert report.suggestions == [] and [u.id for u in report.unfixed] == ["incident 3"]
