"""Gather evidence for a failed job: the scheduler's record, its log files, kernel Xid lines and a
quick node check on its nodes. Every source degrades to "not available" with a reason; a missing
log or an unreachable node never stops the diagnosis.
"""

from __future__ import annotations

import json
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, Field

from classifiers.suspects import SuspectReport, discover_flight_recorder_dumps, find_suspects
from pitstop.cluster.base import HostStatus, JobRecord
from pitstop.events.models import JobEnded
from pitstop.models import NodeCheckReport, SchedulerFacts
from tasks.context import PipelineContext

MAX_KERNEL_LINES = 2000  # per node: enough for every recent Xid, bounded for a noisy dmesg


class NodeEvidence(BaseModel):
    node: str
    kernel_log: str | None = Field(default=None, description="file with this node's NVRM/Xid lines")
    kernel_lines: int = 0
    check: NodeCheckReport | None = None
    problems: list[str] = Field(default_factory=list, description="why something is missing")


class JobEvidence(BaseModel):
    job: JobRecord
    facts: SchedulerFacts
    log_paths: list[str] = Field(default_factory=list)
    kernel_log: str | None = Field(default=None, description="all nodes' kernel lines, one file")
    nodes: list[NodeEvidence] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)

    suspects: SuspectReport = Field(default_factory=SuspectReport, description="nodes the evidence singles out")

    @property
    def failing_nodes(self) -> list[str]:
        return [n.node for n in self.nodes if n.check is not None and n.check.overall == "FAIL"]

    @property
    def faulty_nodes(self) -> list[str]:
        """Nodes with hardware evidence of their own (failing check, Xid, link down): acted on."""
        return list(dict.fromkeys(self.failing_nodes + self.suspects.hardware_nodes))

    @property
    def suspect_nodes(self) -> list[str]:
        """Nodes only the job's logs single out (a lagging rank, a host in an NCCL error):
        excluded from the requeue, never drained on that alone."""
        faulty = set(self.faulty_nodes)
        return [s.node for s in self.suspects.suspects if s.node not in faulty]

    def attribution_notes(self) -> list[str]:
        lines = []
        for s in self.suspects.suspects:
            kind = "hardware evidence" if s.hardware else "named by the job's logs"
            first = s.evidence[0].text[:200] if s.evidence else ""
            lines.append(f"suspect {s.node} ({kind}): {'; '.join(s.reasons[:3])}" + (f" | {first}" if first else ""))
        return lines


def facts_from_job(job: JobRecord, event: JobEnded | None = None) -> SchedulerFacts:
    """The scheduler's view; what the epilog saw (its event) fills what it lacks."""
    return SchedulerFacts(
        state=job.state or (event.state if event else None),
        exit_code=job.exit_code if job.exit_code is not None else (event.exit_code if event else None),
        signal=job.signal if job.signal is not None else (event.signal if event else None),
        reason=job.reason or (event.scheduler_reason if event else None),
    )


def _kernel_text(stdout: str) -> str:
    # Only driver/fabric lines matter for the verdict; keep the file small and the newest lines.
    keep = [line for line in stdout.splitlines() if "NVRM" in line or "mlx5" in line or "I/O error" in line]
    return "\n".join(keep[-MAX_KERNEL_LINES:])


@task(name="gather-evidence", cache_policy=NO_CACHE, retries=0)
def gather_job_evidence(ctx: PipelineContext, job: JobRecord, incident_id: int, event: JobEnded | None = None) -> JobEvidence:
    problems: list[str] = []
    log_paths: list[str] = []
    for raw in dict.fromkeys(p for p in (job.stdout_path, job.stderr_path) if p):
        path = Path(raw)
        if "%" in raw:
            problems.append(f"log path {raw} is an unexpanded Slurm pattern; not read")
        elif path.is_file():
            log_paths.append(str(path))
        else:
            problems.append(f"log {raw} is not readable from this host")

    out_dir = ctx.incident_dir(incident_id)
    nodes = collect_node_evidence(ctx, job.nodes, out_dir)
    kernel_chunks = [Path(n.kernel_log).read_text(encoding="utf-8") for n in nodes if n.kernel_log and n.kernel_lines]
    kernel_log = None
    if kernel_chunks:
        path = out_dir / "kernel.log"
        path.write_text("".join(kernel_chunks), encoding="utf-8")
        kernel_log = str(path)
    return JobEvidence(
        job=job,
        facts=facts_from_job(job, event),
        log_paths=log_paths,
        kernel_log=kernel_log,
        nodes=nodes,
        problems=problems + [f"{n.node}: {p}" for n in nodes for p in n.problems],
        suspects=job_suspects(ctx, job, log_paths, nodes),
    )


def job_suspects(ctx: PipelineContext, job: JobRecord, log_paths: list[str], nodes: list[NodeEvidence]) -> SuspectReport:
    """Which of a multi-node job's nodes the evidence names (a one-node job names its node)."""
    if len(job.nodes) < 2:
        return SuspectReport()
    dirs = [Path(job.work_dir)] if job.work_dir else []
    dirs += list(ctx.settings.pipeline.flight_recorder_dirs)
    dumps = discover_flight_recorder_dumps([d for d in dirs if d.is_dir()])
    kernel = {n.node: Path(n.kernel_log) for n in nodes if n.kernel_log and n.kernel_lines}
    return find_suspects(job.nodes, log_paths=log_paths, kernel_logs=kernel, flight_recorder=dumps)


def collect_node_evidence(ctx: PipelineContext, names: list[str], out_dir: Path) -> list[NodeEvidence]:
    """Kernel (Xid) lines and the quick node check of each node, over the runner's fan-out."""
    pipeline = ctx.settings.pipeline
    nodes = [NodeEvidence(node=n) for n in names]
    if not names:
        return nodes
    kernel_results = ctx.runner.fan_out(names, pipeline.kernel_log_argv, pipeline.node_check_timeout_s)
    check_results = ctx.runner.fan_out(names, pipeline.node_check_argv, pipeline.node_check_timeout_s)
    for evidence, kres, cres in zip(nodes, kernel_results, check_results):
        if kres.status is HostStatus.OK and kres.exit_code == 0:
            text = _kernel_text(kres.stdout)
            path = out_dir / f"kernel-{evidence.node}.log"
            path.write_text(text + "\n" if text else "", encoding="utf-8")
            evidence.kernel_log, evidence.kernel_lines = str(path), len(text.splitlines())
        else:
            evidence.problems.append(f"kernel log: {failure_text(kres)}")
        evidence.check, why = parse_node_check(cres.stdout, cres.status, failure_text(cres))
        if why:
            evidence.problems.append(f"node check: {why}")
    return nodes


@task(name="gather-node-evidence", cache_policy=NO_CACHE, task_run_name="evidence-{node}")
def gather_node_evidence(ctx: PipelineContext, node: str, incident_id: int) -> NodeEvidence:
    return collect_node_evidence(ctx, [node], ctx.incident_dir(incident_id))[0]


def failure_text(res) -> str:
    """Why a remote command gave no usable answer, in one line (the runner's error, else the
    exit status and the start of stderr: `Permission denied`, `command not found`...)."""
    if res.error:
        return res.error
    stderr = " ".join((res.stderr or "").split())[:200]
    return f"{res.host}: exit {res.exit_code}" + (f": {stderr}" if stderr else "")


def parse_node_check(stdout: str, status: HostStatus, error: str | None) -> tuple[NodeCheckReport | None, str | None]:
    """`pitstop node-check --json` exits 2 on a failing node: the JSON, not the exit, is the answer."""
    if not stdout.strip():
        return None, error or f"no output ({status})"
    try:
        return NodeCheckReport.model_validate(json.loads(stdout)), None
    except ValueError as exc:
        return None, f"unreadable node-check output ({exc.__class__.__name__}: {str(exc)[:120]})"
