"""Honest ambiguity: the other causes a verdict could be, and the node evidence that settles it.

Some lines do not name one cause. `unspecified launch failure` is a kernel that crashed: a bug in
the code, or a GPU that faulted under it (then the driver logs an Xid on that node). An NCCL
watchdog timeout is a rank that stopped talking: a hung or slow rank, a fabric port that went
down, or a GPU that hung the collective. The log alone cannot tell; the job's nodes can. Each row
of `AMBIGUOUS` names such a verdict, the alternative, what would tell them apart (in words for the
operator), and the node evidence (`NodeTest`) that settles it when the flow has gathered it.

Pure: `alternatives_for` ranks alternatives from the classifier's candidates and this table;
`settle` applies gathered node evidence (`NodeFinding`) to a verdict. No I/O.

Sources: NVIDIA Xid catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html)
for which Xids mean hardware; NCCL's troubleshooting guide
(https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html) for timeouts that
are network or a peer that stopped.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from pitstop.models import Alternative, Cause, Evidence, Verdict

MAX_ALTERNATIVES = 3
SETTLED_CONFIDENCE = 0.8  # a verdict the node evidence confirmed or switched
CONFIRMED_FLOOR = 0.75  # the log's cause, with every node read and nothing found against it


class NodeTest(StrEnum):
    """Node evidence that settles an ambiguity; the flow gathers it before it decides."""

    GPU_XID = "gpu_xid"  # a hardware/memory/NVLink/driver Xid in a job node's kernel log
    GPU_CHECK = "gpu_check"  # a job node's GPU check (nvml / dcgm) fails
    FABRIC_CHECK = "fabric_check"  # a job node's InfiniBand check fails (port down, errors)


class AmbiguousRow(BaseModel):
    model_config = ConfigDict(frozen=True)

    signatures: frozenset[str] = frozenset()  # verdict signatures this row covers...
    causes: frozenset[Cause] = frozenset()  # ...or every verdict of these causes
    alternative: Cause
    share: float = Field(gt=0, le=1, description="of the probability the verdict leaves open")
    test: NodeTest
    tells_apart: str


_XID_WORDS = ("an Xid on that node at that time (NVIDIA's catalog: 43, 48, 62, 63, 64, 74, 79, 94, 95, "
              "119, 120...) means the GPU; ")
_CRASHED_KERNEL = frozenset({"cuda-unspecified-launch-failure", "cuda-illegal-memory-access",
                             "cuda-error-unknown"})

# fmt: off
AMBIGUOUS: tuple[AmbiguousRow, ...] = (
    AmbiguousRow(signatures=_CRASHED_KERNEL, alternative=Cause.GPU_HARDWARE, share=0.8, test=NodeTest.GPU_XID,
                 tells_apart=_XID_WORDS + "no Xid on any job node, and the same error on other nodes, "
                                          "means the code"),
    AmbiguousRow(signatures=_CRASHED_KERNEL, alternative=Cause.GPU_HARDWARE, share=0.6, test=NodeTest.GPU_CHECK,
                 tells_apart="a failing GPU check (NVML / DCGM) on a job node means the GPU"),
    AmbiguousRow(signatures=frozenset({"gpu-memory-access-fault"}), alternative=Cause.GPU_HARDWARE, share=0.5,
                 test=NodeTest.GPU_CHECK,
                 tells_apart="a failing GPU check on a job node means the GPU; a clean one means the code or "
                             "the driver stack"),
    AmbiguousRow(signatures=frozenset({"nvml-init-unknown-error"}), alternative=Cause.GPU_HARDWARE, share=0.3,
                 test=NodeTest.GPU_CHECK,
                 tells_apart="a failing GPU check on the node itself means the GPU; a clean one means the "
                             "container lost its device access"),
    AmbiguousRow(signatures=frozenset({"cuda-error"}), alternative=Cause.GPU_HARDWARE, share=0.4, test=NodeTest.GPU_XID,
                 tells_apart=_XID_WORDS + "none means the CUDA call failed in the code"),
    AmbiguousRow(causes=frozenset({Cause.NCCL_TIMEOUT}), alternative=Cause.NETWORK_FABRIC, share=0.5,
                 test=NodeTest.FABRIC_CHECK,
                 tells_apart="an InfiniBand port down or erroring on a job node means the fabric; a clean "
                             "fabric means a hung or slow rank (see the suspects)"),
    AmbiguousRow(causes=frozenset({Cause.NCCL_TIMEOUT}), alternative=Cause.GPU_HARDWARE, share=0.3,
                 test=NodeTest.GPU_XID,
                 tells_apart=_XID_WORDS + "the GPU hung the collective"),
    AmbiguousRow(causes=frozenset({Cause.CRASH_SIGNAL}), alternative=Cause.GPU_HARDWARE, share=0.3,
                 test=NodeTest.GPU_XID,
                 tells_apart=_XID_WORDS + "none means the process itself crashed"),
)
# fmt: on


def rows_for(cause: Cause, signature: str) -> list[AmbiguousRow]:
    return [r for r in AMBIGUOUS if signature in r.signatures or cause in r.causes]


class Rival(BaseModel):
    """The best candidate of another cause, as the classifier ranked it (classifiers.decide)."""

    cause: Cause
    signature: str
    confidence: float
    priority_gap: int = Field(ge=0, description="how far below the winner it ranked")
    hint: str = ""


def _rival_confidence(rival: Rival, close: int) -> float:
    # A rival within the "close" band is nearly as likely; far below, it is a faint possibility.
    factor = 0.85 if rival.priority_gap < close else max(0.1, 1.0 - rival.priority_gap / 50)
    return rival.confidence * factor


def alternatives_for(cause: Cause, signature: str, confidence: float, rivals: Sequence[Rival],
                     close: int) -> list[Alternative]:
    """Ranked alternatives: the table's rows for this verdict, then the log's rival causes."""
    rows = rows_for(cause, signature)
    by_cause: dict[Cause, Alternative] = {}
    left = max(0.0, 1.0 - confidence)
    for row in rows:
        alt = Alternative(cause=row.alternative, confidence=round(min(left * row.share, confidence), 3),
                          tells_apart=row.tells_apart, settled_by=row.test.value)
        if row.alternative not in by_cause or by_cause[row.alternative].confidence < alt.confidence:
            by_cause[row.alternative] = alt
    for rival in rivals:
        if rival.cause is cause or rival.cause is Cause.SUCCESS:
            continue
        conf = round(min(_rival_confidence(rival, close), confidence), 3)
        known = by_cause.get(rival.cause)
        if known is not None:
            by_cause[rival.cause] = known.model_copy(update={
                "confidence": max(known.confidence, conf), "signature": known.signature or rival.signature})
            continue
        by_cause[rival.cause] = Alternative(
            cause=rival.cause, confidence=conf, signature=rival.signature,
            tells_apart=f"the log also shows {rival.signature}" + (f" ({rival.hint})" if rival.hint else ""))
    ranked = sorted(by_cause.values(), key=lambda a: (-a.confidence, a.cause.value))
    return ranked[:MAX_ALTERNATIVES]


class NodeFinding(BaseModel):
    """What the flow learned about one of the job's nodes before deciding."""

    node: str
    kernel_read: bool = Field(description="its kernel log was read (an empty one counts)")
    gpu_xids: list[str] = Field(default_factory=list, description="hardware-implicating Xid lines")
    checks_run: list[str] = Field(default_factory=list, description="checks that gave a verdict (not UNAVAILABLE)")
    failing_checks: dict[str, str] = Field(default_factory=dict, description="check name -> summary")
    why_unread: str = ""


# test -> (the checks whose failure it looks for, or None for the kernel log; words for the operator)
_TESTS: dict[NodeTest, tuple[frozenset[str] | None, str]] = {
    NodeTest.GPU_XID: (None, "hardware Xid in the kernel log"),
    NodeTest.GPU_CHECK: (frozenset({"nvml", "dcgm"}), "failing GPU check (NVML/DCGM)"),
    NodeTest.FABRIC_CHECK: (frozenset({"ib"}), "failing InfiniBand check"),
}


def _evaluable(test: NodeTest, finding: NodeFinding) -> bool:
    checks, _ = _TESTS[test]
    return finding.kernel_read if checks is None else bool(checks & set(finding.checks_run))


def _hits(test: NodeTest, finding: NodeFinding) -> str | None:
    """The line that makes `test` true on this node, or None."""
    checks, _ = _TESTS[test]
    if checks is None:
        return finding.gpu_xids[0] if finding.gpu_xids else None
    failing = [f"{name}: {summary}" for name, summary in finding.failing_checks.items() if name in checks]
    return failing[0] if failing else None


def _names(nodes: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(nodes[:limit])
    return shown + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")


def decided_over(cause: Cause, signature: str, rivals: Sequence[Rival]) -> str:
    """When the winner is the very alternative a rival's row names (an Xid over the application's
    `unspecified launch failure`), say so: the classifier already settled it from the kernel log."""
    for rival in rivals:
        if any(row.alternative is cause for row in rows_for(rival.cause, rival.signature)):
            what = "the driver's own record of the event" if signature.startswith("xid-") else "the more direct evidence"
            return f"{signature} ({what}) outranks {rival.signature}: {cause.value}, not {rival.cause.value}"
    return ""


def settle(verdict: Verdict, findings: Sequence[NodeFinding]) -> Verdict:
    """Apply the job nodes' evidence to an ambiguous verdict.

    An alternative whose test holds on a node takes over (that node's line becomes the first
    evidence). When a test could be run on every node and held nowhere, the log's cause stands,
    surer. A node that could not be examined leaves the verdict open, and `decided_by` says which.
    """
    rows = [r for r in rows_for(verdict.cause, verdict.signature) if r.alternative is not verdict.cause]
    if not rows or not findings:
        return verdict
    for row in rows:
        for finding in findings:
            line = _hits(row.test, finding)
            if line is None:
                continue
            others = [a for a in verdict.alternatives if a.cause is not row.alternative]
            demoted = Alternative(cause=verdict.cause, confidence=round(min(verdict.confidence, 0.5), 3),
                                  signature=verdict.signature, tells_apart=row.tells_apart)
            return verdict.model_copy(update={
                "cause": row.alternative,
                "signature": f"{verdict.signature}+{row.test.value}",
                "confidence": SETTLED_CONFIDENCE,
                "evidence": [Evidence(line=0, text=line[:500], source=f"node {finding.node}"), *verdict.evidence][:6],
                "hint": f"{finding.node}'s own evidence points at {row.alternative.value}, not "
                        f"{verdict.cause.value}: {row.tells_apart}",
                "alternatives": [demoted, *others][:MAX_ALTERNATIVES],
                "decided_by": f"{_TESTS[row.test][1]} on {finding.node}: {line[:200]}",
            })
    tests = list(dict.fromkeys(r.test for r in rows))
    complete = [t for t in tests if all(_evaluable(t, f) for f in findings)]
    missing = {t: [f for f in findings if not _evaluable(t, f)] for t in tests if t not in complete}
    not_checked = "; ".join(
        f"not checked: {_TESTS[t][1]} on {_names([f.node + (f' ({f.why_unread})' if f.why_unread else '') for f in fs])}"
        for t, fs in missing.items())
    if not complete:
        return verdict.model_copy(update={
            "decided_by": f"undecided, the node evidence that would tell is missing ({not_checked})"})
    found_none = " nor ".join(_TESTS[t][1] for t in complete)
    text = f"no {found_none} on any job node ({_names([f.node for f in findings])}): {verdict.cause.value} stands"
    return verdict.model_copy(update={
        "confidence": max(verdict.confidence, CONFIRMED_FLOOR) if not missing else verdict.confidence,
        "decided_by": text + (f"; {not_checked}" if not_checked else ""),
    })
