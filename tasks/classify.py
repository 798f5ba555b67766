"""Classify a failed job from its evidence with the shared classifiers."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from classifiers import classify_files
from classifiers.ambiguity import NodeFinding, settle
from pitstop.models import Cause, CheckStatus, Evidence, Verdict
from pitstop.node.xid import Implicates, parse_kernel_log
from tasks.evidence import JobEvidence, NodeEvidence

# Xids that say the GPU (or its memory, links, firmware) faulted, per NVIDIA's catalog; an
# application fault (13, 31...), a sympathetic or informational Xid says nothing about the node.
_GPU_IMPLICATED = frozenset({Implicates.HARDWARE, Implicates.MEMORY, Implicates.NVLINK, Implicates.DRIVER})


@task(name="classify", cache_policy=NO_CACHE)
def classify_job(evidence: JobEvidence) -> Verdict:
    kernel = Path(evidence.kernel_log) if evidence.kernel_log else None
    try:
        verdict = classify_files([Path(p) for p in evidence.log_paths], evidence.facts, kernel_log=kernel)
        # The node evidence was gathered before deciding: an ambiguous verdict is settled by it.
        return settle(verdict, [node_finding(n) for n in evidence.nodes])
    except Exception as exc:  # a classifier bug must not lose the incident
        return Verdict(
            cause=Cause.UNKNOWN,
            signature="classifier-error",
            confidence=0.0,
            evidence=[Evidence(line=0, text=f"classifier failed: {exc}", source="pitstop")],
            hint="the classifier raised; see the flow run log",
        )


def node_finding(node: NodeEvidence) -> NodeFinding:
    """One node's evidence as the ambiguity check reads it: its GPU Xids and its checks' verdicts."""
    xids: list[str] = []
    why = "" if node.kernel_log else next((p for p in node.problems if p.startswith("kernel log")), "kernel log not read")
    if node.kernel_log:
        try:
            scan = parse_kernel_log(Path(node.kernel_log).read_bytes())
        except OSError as exc:
            why = f"kernel log copy unreadable: {exc.strerror or exc}"
        else:
            xids = [e.raw for e in scan.events if e.info is not None and e.info.implicates in _GPU_IMPLICATED]
    read = not why
    checks = node.check.checks if node.check is not None else []
    return NodeFinding(
        node=node.node, kernel_read=read, gpu_xids=xids, why_unread=why,
        checks_run=[c.name for c in checks if c.status is not CheckStatus.UNAVAILABLE],
        failing_checks={c.name: c.summary for c in checks if c.status is CheckStatus.FAIL},
    )
