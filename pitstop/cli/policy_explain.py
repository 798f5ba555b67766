"""What the flows would decide for given evidence, touching nothing: classification, suspects and
the pure `decide`, composed here because the CLI is the one place allowed to import them all.

The history is empty (a first occurrence) and every node is taken as idle and in service, unless
the caller says otherwise; the printed notes say so.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, Field

from pitstop.cluster.base import JobRecord, NodeInfo, validate_node_name
from pitstop.models import Cause, SchedulerFacts, Verdict
from pitstop.node.xid import XID_CATALOG
from pitstop.policy.decide import decide
from pitstop.policy.explain import PlanView, SuspectView, plan_view
from pitstop.policy.history import History, PartitionState
from pitstop.policy.model import Policy
from pitstop.policy.safety import ModeState

EXPLAIN_JOB_ID = "0"  # a placeholder job: explain never reads or changes a real one
EXPLAIN_NOTE = "explain: no history (first occurrence), every node idle and in service; nothing was changed"


class ExplainRequest(BaseModel):
    logs: list[Path] = Field(default_factory=list, description="the job's own log files")
    kernel_logs: dict[str, Path] = Field(default_factory=dict, description="node -> its kernel log")
    xid: int | None = Field(default=None, ge=0)
    node: str | None = Field(default=None, description="the alarmed node (a node alarm)")
    cause: Cause | None = None
    signature: str | None = None
    nodes: list[str] = Field(default_factory=list, description="the job's nodes, in Slurm's order")
    tasks_per_node: str | None = None
    state: str | None = Field(default=None, description="the job's Slurm state, e.g. NODE_FAIL")
    flight_recorder: list[Path] = Field(default_factory=list, description="dump files or directories")

    @property
    def is_job(self) -> bool:
        return bool(self.logs or self.nodes or self.state)


def xid_line(xid: int) -> str:
    """A kernel line in the driver's format, so `--xid N` goes through the same classifier."""
    info = XID_CATALOG.get(xid)
    return f"NVRM: Xid (PCI:0000:3b:00): {xid}, pid=1, name=explain, {info.description if info else 'Xid'}"


def _verdict(req: ExplainRequest) -> Verdict:
    from classifiers import classify_text, classify_scanned, scan_logs

    if req.cause is not None:
        return Verdict(cause=req.cause, signature=req.signature or req.cause.value, confidence=0.9)
    facts = SchedulerFacts(state=req.state) if req.state else None
    if req.xid is not None and not req.logs and not req.kernel_logs:
        return classify_text("", facts, kernel_text=xid_line(req.xid))
    paths = [*req.logs, *req.kernel_logs.values()]
    names = [*map(str, req.logs), *("kernel" for _ in req.kernel_logs)]
    verdict = classify_scanned(scan_logs(paths, sources=names), facts)
    if req.xid is not None:  # the Xid the caller names wins over what the logs say
        xid_verdict = classify_text("", facts, kernel_text=xid_line(req.xid))
        return xid_verdict.model_copy(update={"evidence": xid_verdict.evidence + verdict.evidence})
    return verdict


def _dumps(paths: list[Path]) -> list[Path]:
    from classifiers.suspects import discover_flight_recorder_dumps

    files = [p for p in paths if p.is_file()]
    return files + discover_flight_recorder_dumps([p for p in paths if p.is_dir()])


def explain(req: ExplainRequest, policy: Policy, mode: ModeState, now: datetime | None = None) -> PlanView:
    from classifiers.suspects import find_suspects

    for name in [*req.nodes, *req.kernel_logs, *([req.node] if req.node else [])]:
        validate_node_name(name)
    verdict = _verdict(req)
    nodes = list(dict.fromkeys(req.nodes or ([req.node] if req.node else []) or list(req.kernel_logs)))
    faulty: list[str] | None = [req.node] if req.node else None
    suspects: list[str] = []
    views: list[SuspectView] = []
    notes = [EXPLAIN_NOTE]
    if len(nodes) > 1:
        report = find_suspects(nodes, log_paths=req.logs, kernel_logs=req.kernel_logs,
                               tasks_per_node=req.tasks_per_node, flight_recorder=_dumps(req.flight_recorder))
        views = [SuspectView(node=s.node, hardware=s.hardware, reasons=s.reasons) for s in report.suspects]
        faulty = list(dict.fromkeys((faulty or []) + report.hardware_nodes))
        suspects = [s.node for s in report.suspects if not s.hardware]
        notes += report.notes[:5]
    job = None
    if req.is_job:
        job = JobRecord(job_id=EXPLAIN_JOB_ID, user="user", partition="gpu", state=req.state or "FAILED",
                        nodes=nodes, time_limit_min=60)
    infos = {n: NodeInfo(name=n, state="IDLE", partitions=["gpu"]) for n in nodes}
    size = max(16, len(nodes) * 4)  # roomy: explain shows the policy, not a guard tripping on a toy cluster
    history = History(partitions={"gpu": PartitionState(name="gpu", size=size, healthy=size)}, cluster_size=size)
    decision = decide(verdict, policy=policy, history=history, mode=mode, now=now or datetime.now(timezone.utc),
                      incident_id="explain", job=job, node=None if job else req.node, nodes=infos,
                      faulty_nodes=faulty if (job is None or faulty) else None, suspect_nodes=suspects)
    decision.notes[:0] = notes
    return plan_view(decision, views)
