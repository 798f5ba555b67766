"""post_failure: a job ended badly -> evidence, verdict, decision, actions, records, notification.

Idempotent: the incident is keyed by (cluster, job id, end time); a second delivery of the same
event finds it finished (or being handled) and does nothing; a run killed mid-way is re-run
safely because every action is journaled and finished ones are skipped.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from pydantic import BaseModel, Field

from pitstop.cluster.base import ClusterError, JobRecord, validate_job_id
from pitstop.models import Verdict
from tasks import journal
from tasks.classify import classify_job
from tasks.context import build_context
from tasks.decide import decide_remediation
from tasks.evidence import gather_job_evidence
from tasks.message import ActionLine, IncidentSummary
from tasks.notify import notify_incident
from tasks.remediate import carry_out
from tasks.tickets import open_rma_ticket


class FlowReport(BaseModel):
    """What a remediation flow run returns (also what `pitstop demo` prints)."""

    incident_id: int | None = None
    subject: str
    status: str = Field(description="done | duplicate | busy | failed")
    verdict: Verdict | None = None
    actions: list[ActionLine] = Field(default_factory=list)
    explain: list[str] = Field(default_factory=list)
    notified: list[str] = Field(default_factory=list)
    flow_run_url: str | None = None


@flow(name="post-failure", flow_run_name="post-failure-job-{job_id}", log_prints=False)
def post_failure(job_id: str, cluster: str | None = None, facts: dict | None = None) -> FlowReport:
    log = get_run_logger()
    ctx = build_context(cluster=cluster)
    try:
        return _post_failure(ctx, log, str(job_id), facts)
    finally:
        ctx.close()


def _post_failure(ctx, log, job_id: str, facts: dict | None) -> FlowReport:
    job = read_job(ctx, log, job_id, facts)
    handle = journal.open_job_incident(ctx, job, facts)
    if handle.status == "done":
        log.info("incident %s for job %s is already remediated: nothing to do", handle.id, job_id)
        return FlowReport(incident_id=handle.id, subject=f"job {job_id}", status="duplicate")
    try:
        with journal.incident_lock(ctx, handle.id):
            return _remediate(ctx, handle, job, facts)
    except journal.IncidentBusy as busy:
        log.info("%s: leaving it to that run", busy)
        return FlowReport(incident_id=handle.id, subject=f"job {job_id}", status="busy")


def read_job(ctx, log, job_id: str, facts: dict | None) -> JobRecord:
    """The scheduler's record; if it has forgotten the job (or is down), what the event said.
    An incident is never lost because slurmctld purged a job before the flow ran."""
    validate_job_id(job_id)  # a bad id is refused with a clear message, before anything else
    try:
        return ctx.scheduler.job(job_id)
    except ClusterError as exc:
        if not facts:
            raise ClusterError(f"cannot read job {job_id} and the event carried no facts: {exc}") from exc
        log.warning("job %s: scheduler unavailable (%s); using the event's facts", job_id, exc)
        return job_from_facts(job_id, facts)


def job_from_facts(job_id: str, facts: dict) -> JobRecord:
    """A JobRecord from a `pitstop.job.ended` payload (pitstop.events.models.JobEnded fields)."""
    def text(name):
        value = facts.get(name)
        return str(value) if value not in (None, "") and "%" not in str(value) else None

    return JobRecord(
        job_id=job_id, name=text("job_name"), user=text("user"), partition=text("partition"),
        state=str(facts.get("state") or "UNKNOWN"), exit_code=facts.get("exit_code"), signal=facts.get("signal"),
        nodes=[str(n) for n in facts.get("nodes") or []], end_time=journal.incident_end_time_of(facts),
        stdout_path=text("stdout"), stderr_path=text("stderr"), work_dir=text("work_dir"),
        restart_count=int(facts.get("restart_count") or 0), reason="scheduler record unavailable",
    )


def _remediate(ctx, handle, job, facts) -> FlowReport:
    from pitstop.policy.decide import Decision

    evidence = gather_job_evidence(ctx, job, handle.id, facts)
    verdict = classify_job(evidence)
    journal.save_verdict(ctx, handle.id, verdict)
    fresh = journal.incident_decision(ctx, handle.id)
    if fresh is not None:
        decision = Decision.model_validate(fresh)  # a re-run keeps the first run's plan
    else:
        faulty = evidence.failing_nodes or None
        decision = decide_remediation(ctx, handle.id, verdict, job=job, faulty_nodes=faulty)
        journal.save_decision(ctx, handle.id, decision)

    def summary(lines, waiting=None) -> IncidentSummary:
        return IncidentSummary(
            incident_id=handle.id, subject_kind="job", subject=job.job_id, cluster=ctx.cluster_name,
            mode=decision.mode, dry_run=decision.dry_run, verdict=verdict, user=job.user,
            nodes=job.nodes, actions=lines, explain=decision.explain(), problems=evidence.problems,
            flow_run_url=ctx.flow_run_url, awaiting_approval=waiting,
        )

    def ask(action) -> None:
        notify_incident(ctx, summary([], waiting=action.describe()), to_user=False)

    outcome = carry_out(ctx, handle.id, decision, ask, lambda a, f: open_rma_ticket(ctx, handle.id, a, verdict, evidence.model_dump(mode="json"), f))
    deliveries = notify_incident(ctx, summary(outcome.lines))
    journal.finish_notifications(ctx, handle.id, deliveries)
    journal.settle_notify_lines(outcome.lines, deliveries)
    journal.set_status(ctx, handle.id, "done")
    return FlowReport(
        incident_id=handle.id, subject=f"job {job.job_id}", status="done", verdict=verdict,
        actions=outcome.lines, explain=decision.explain(),
        notified=[f"{d.audience}: {d.status}" for d in deliveries], flow_run_url=ctx.flow_run_url,
    )
