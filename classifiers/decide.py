"""Pure decision: log, kernel and scheduler hits in, one Verdict out. No I/O.

The highest-priority hit names the cause (ties: the earliest line wins, since the first fault is
usually the root). Other hits of the same cause corroborate it; a close runner-up of another cause
lowers the confidence. A success hit never wins against a scheduler fact that says failure.
Training-progress findings (classifiers.progress, carried in a source's hits as ProgressHit) are
`numerical` candidates like any rule hit, with their own priority. After a line in which the run
itself declared success (a rule with `ends_run`), shutdown noise in the same source ranks below
success (`after_the_end`). A line healthy runs print too (`routine`) ranks below a success line
after it (`routine_before_success`); a line that only reports that something else ended the step
(`consequence`) ranks below an earlier failing line (`consequence_of_failure`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from pitstop.models import Cause, Evidence, Verdict

from classifiers.ambiguity import Rival, alternatives_for, decided_over
from classifiers.hits import Hit, ProgressHit
from classifiers.rule_model import CLOSE_PRIORITY, Rule
from classifiers.scheduler_facts import FactHit

MAX_EVIDENCE = 5
_CATALOGUED_XID = re.compile(r"xid-[0-9]+")
XID_WEAK = 26  # classifiers.xid_rules.WEAK: informational/sympathetic Xids never take over
_CLOSE_PRIORITY = CLOSE_PRIORITY  # a rival cause within this many priority points makes us less sure
_PROGRESS_ROW = 10_000  # progress findings sort after every rule row on the same line


class Candidate(BaseModel):
    model_config = ConfigDict(frozen=True)

    cause: Cause
    signature: str
    priority: int
    confidence: float
    hint: str
    evidence: Evidence
    last: Evidence | None = None  # the same rule's last line in this source, when not the first
    order: tuple[int, int, int]  # (source rank, line, rule row): earlier wins ties
    defers_to_xid: bool = False  # see Rule.defers_to_xid
    ends_run: bool = False  # see Rule.ends_run
    routine: bool = False  # see Rule.routine
    consequence: bool = False  # see Rule.consequence


def candidates_from(
    hits_by_source: Sequence[Sequence[Hit | ProgressHit]], rules: Sequence[Rule], facts: Sequence[FactHit]
) -> list[Candidate]:
    out: list[Candidate] = []
    for rank, hits in enumerate(hits_by_source):
        findings = [h for h in hits if isinstance(h, ProgressHit)]
        for n, found in enumerate(findings):
            (line, text), *rest = found.evidence
            last = rest[-1] if rest else None
            out.append(
                Candidate(
                    cause=Cause(found.cause), signature=found.signature, priority=found.priority,
                    confidence=found.confidence, hint=found.hint,
                    evidence=Evidence(line=line, text=text, source=found.source),
                    last=(Evidence(line=last[0], text=last[1], source=found.source)
                          if last is not None and last[0] != line else None),
                    order=(rank, line, _PROGRESS_ROW + n),
                )
            )
    for rank, hits in enumerate(hits_by_source):
        for hit in hits:
            if isinstance(hit, ProgressHit):
                continue
            rule = rules[hit.rule_index]
            out.append(
                Candidate(
                    cause=rule.cause, signature=hit.signature, priority=rule.priority,
                    confidence=rule.confidence, hint=rule.hint,
                    evidence=Evidence(line=hit.line, text=hit.text, source=hit.source),
                    last=(Evidence(line=hit.last_line, text=hit.last_text or "", source=hit.source)
                          if hit.last_line is not None else None),
                    order=(rank, hit.line, hit.rule_index),
                    defers_to_xid=rule.defers_to_xid, ends_run=rule.ends_run,
                    routine=rule.routine, consequence=rule.consequence,
                )
            )
    for fact in facts:
        out.append(
            Candidate(
                cause=fact.rule.cause, signature=fact.rule.signature, priority=fact.rule.priority,
                confidence=fact.rule.confidence, hint=fact.rule.hint,
                evidence=Evidence(line=0, text=fact.text, source="scheduler"),
                order=(len(hits_by_source), 0, 0),
            )
        )
    return out


# What a finished run prints as it shuts down. After the run's own final verdict of success
# (Rule.ends_run) these causes are noise; a GPU, node or memory fault after it is not (the node
# still needs a look) and neither is a numerical finding.
SHUTDOWN_NOISE = frozenset({
    Cause.SOFTWARE_BUG, Cause.CRASH_SIGNAL, Cause.NCCL_TIMEOUT, Cause.NETWORK_FABRIC, Cause.STORAGE_IO,
    Cause.ENVIRONMENT, Cause.TIME_LIMIT, Cause.PREEMPTED,
})
AFTER_END_PRIORITY = 3  # below every success row (4-5): still a rival, never the cause


def after_the_end(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Noise printed after a run's own final success line, in the same source, demoted below success."""
    ends: dict[int, int] = {}  # source rank -> the first line that ended the run
    for c in candidates:
        if c.ends_run and c.evidence.source != "scheduler":
            ends[c.order[0]] = min(ends.get(c.order[0], c.order[1]), c.order[1])
    if not ends:
        return list(candidates)
    return [
        c.model_copy(update={"priority": min(c.priority, AFTER_END_PRIORITY)})
        if c.cause in SHUTDOWN_NOISE and c.order[0] in ends and c.order[1] > ends[c.order[0]] else c
        for c in candidates
    ]


def routine_before_success(candidates: Sequence[Candidate]) -> list[Candidate]:
    """A routine warning (an fp16 overflow skip) that the run outlived, by its own later success line,
    ranks below success: the run said it finished after the warnings began."""
    finished: dict[int, int] = {}  # source rank -> the last line a success row matched
    for c in candidates:
        if c.cause is Cause.SUCCESS and c.evidence.source != "scheduler":
            line = c.last.line if c.last is not None else c.evidence.line
            finished[c.order[0]] = max(finished.get(c.order[0], line), line)
    return [
        c.model_copy(update={"priority": min(c.priority, AFTER_END_PRIORITY)})
        if c.routine and c.order[1] < finished.get(c.order[0], -1) else c
        for c in candidates
    ]


# A failing line strong enough to be why srun ended the step: from the program's own error report
# (app-error-at-source, 28) up; the weaker rows are informational Xids and bare kills.
FAILING_LINE_MIN_PRIORITY = 28


def consequence_of_failure(candidates: Sequence[Candidate]) -> list[Candidate]:
    """A bare step cancel after a task's own failure (a traceback, MPI_Abort) is srun ending the
    step (--kill-on-bad-exit): the earlier failing line in the same source outranks it."""
    out = []
    for c in candidates:
        if c.consequence:
            before = [o.priority for o in candidates
                      if o.order[0] == c.order[0] and o.order[1] < c.order[1] and o.cause is not Cause.SUCCESS
                      and o.cause is not c.cause and not (o.routine or o.consequence)
                      and o.priority >= FAILING_LINE_MIN_PRIORITY and o.evidence.source != "scheduler"]
            if before:
                c = c.model_copy(update={"priority": min(c.priority, max(before) - 1)})
        out.append(c)
    return out


def decide(candidates: Sequence[Candidate]) -> Verdict:
    scheduler_says_failed = any(
        c.evidence.source == "scheduler" and c.cause is not Cause.SUCCESS for c in candidates
    )
    candidates = consequence_of_failure(routine_before_success(after_the_end(candidates)))
    pool = [c for c in candidates if not (scheduler_says_failed and c.cause is Cause.SUCCESS)]
    if not pool:
        return Verdict(
            cause=Cause.UNKNOWN, signature="no-match", confidence=0.1,
            hint="nothing recognisable in the log or scheduler facts: read the log tail",
        )
    ranked = sorted(pool, key=lambda c: (-c.priority, c.order))
    if ranked[0].defers_to_xid:
        xid = next((c for c in ranked if _CATALOGUED_XID.fullmatch(c.signature) and c.priority > XID_WEAK), None)
        if xid is not None:  # the driver's own record of the event outranks the app's wording of it
            ranked = [xid, *[c for c in ranked if c is not xid]]
    winner = ranked[0]
    same = [c for c in ranked[1:] if c.cause is winner.cause]
    rival = next((c for c in ranked[1:] if c.cause is not winner.cause), None)
    confidence = winner.confidence + 0.03 * min(len(same), 3)
    if rival is not None and winner.priority - rival.priority < _CLOSE_PRIORITY:
        confidence *= 0.85
    evidence = [winner.evidence]
    seen = {(winner.evidence.source, winner.evidence.line)}
    for c in sorted(same, key=lambda c: c.order):
        where = (c.evidence.source, c.evidence.line)
        if where not in seen or c.evidence.source == "scheduler" and c.evidence not in evidence:
            seen.add(where)
            evidence.append(c.evidence)
    if winner.last is not None and (winner.last.source, winner.last.line) not in seen:
        # First and last occurrence of the deciding rule: when it started and that it persisted.
        evidence = [*evidence[: MAX_EVIDENCE - 1], winner.last]
    confidence = round(min(confidence, 0.99), 3)
    rivals = _rivals(winner, ranked)
    return Verdict(
        cause=winner.cause,
        signature=winner.signature,
        confidence=confidence,
        evidence=evidence[:MAX_EVIDENCE],
        hint=winner.hint,
        alternatives=alternatives_for(winner.cause, winner.signature, confidence, rivals, _CLOSE_PRIORITY),
        decided_by=decided_over(winner.cause, winner.signature, rivals),
    )


def _rivals(winner: Candidate, ranked: Sequence[Candidate]) -> list[Rival]:
    """The best-ranked candidate of every other cause, in rank order.

    Only candidates within CLOSE_PRIORITY of their own source's strongest hit count: those are the
    ones a pruned scan is guaranteed to keep (classifiers.scan), so the alternatives do not depend
    on the engine, the window size or the thread count.
    """
    strongest: dict[int, int] = {}
    for c in ranked:
        strongest[c.order[0]] = max(strongest.get(c.order[0], 0), c.priority)
    best: dict[Cause, Candidate] = {}
    for c in ranked:
        if c.cause is not winner.cause and c.priority > strongest[c.order[0]] - _CLOSE_PRIORITY:
            best.setdefault(c.cause, c)
    return [Rival(cause=c.cause, signature=c.signature, confidence=c.confidence, hint=c.hint,
                  priority_gap=max(0, winner.priority - c.priority)) for c in best.values()]
