"""post_failure: a job ended badly -> evidence, verdict, decision, actions, records, notification.

Idempotent: the incident is keyed by (cluster, job id, end time); a second delivery of the same
event finds it finished (or being handled) and does nothing; a run killed mid-way is re-run
safely because every action is journaled and finished ones are skipped.

The event payload (`facts`, what Prefect's trigger templates from the event) is parsed once into
`JobEnded` and passed on typed.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from pydantic import ValidationError

from flows.remediation import FlowReport, IncidentSubject, end_of_run, on_cancelled, remediate
from pitstop.cluster.base import ClusterError, JobRecord, validate_job_id
from pitstop.events.models import JobEnded
from tasks import journal
from tasks.classify import classify_job
from tasks.context import build_context
from tasks.evidence import gather_job_evidence

__all__ = ["FlowReport", "job_event", "job_from_facts", "post_failure", "read_job"]


@flow(name="post-failure", flow_run_name="post-failure-job-{job_id}", log_prints=False,
      on_cancellation=[on_cancelled])
def post_failure(job_id: str, cluster: str | None = None, facts: dict | None = None) -> FlowReport:
    log = get_run_logger()
    ctx = build_context(cluster=cluster)
    try:
        # the report, in a state named for the approval answer ("Denied", "Timed out", ...)
        return end_of_run(_post_failure(ctx, log, str(job_id), job_event(log, str(job_id), cluster, facts)))
    finally:
        ctx.close()


def job_event(log, job_id: str, cluster: str | None, facts: dict | None) -> JobEnded | None:
    """The trigger's payload as a JobEnded; a payload that is not one is logged and ignored
    (the scheduler's record still drives the incident)."""
    if not facts:
        return None
    given = {k: v for k, v in facts.items() if v is not None}
    data = {"cluster": cluster or given.get("cluster") or "-", "state": "UNKNOWN", **given, "job_id": job_id}
    try:
        return JobEnded.model_validate(data)
    except ValidationError as exc:
        log.warning("job %s: the event payload is not a pitstop.job.ended payload (%s); ignoring it",
                    job_id, "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3]))
        return None


def _post_failure(ctx, log, job_id: str, event: JobEnded | None) -> FlowReport:
    job = read_job(ctx, log, job_id, event)
    handle = journal.open_job_incident(ctx, job, event)
    try:
        with journal.incident_lock(ctx, handle.id) as status:  # read under the lock: never stale
            if status == "done" or (status is None and handle.status == "done"):
                log.info("incident %s for job %s is already remediated: nothing to do", handle.id, job_id)
                return FlowReport(incident_id=handle.id, subject=f"job {job_id}", status="duplicate")
            return _remediate(ctx, handle, job, event)
    except journal.IncidentBusy as busy:
        log.info("%s: leaving it to that run", busy)
        return FlowReport(incident_id=handle.id, subject=f"job {job_id}", status="busy")


def read_job(ctx, log, job_id: str, event: JobEnded | None) -> JobRecord:
    """The scheduler's record; if it has forgotten the job (or is down), what the event said.
    An incident is never lost because slurmctld purged a job before the flow ran."""
    validate_job_id(job_id)  # a bad id is refused with a clear message, before anything else
    try:
        return ctx.scheduler.job(job_id)
    except ClusterError as exc:
        if event is None:
            raise ClusterError(f"cannot read job {job_id} and the event carried no facts: {exc}") from exc
        log.warning("job %s: scheduler unavailable (%s); using the event's facts", job_id, exc)
        return job_from_facts(job_id, event)


def job_from_facts(job_id: str, event: JobEnded) -> JobRecord:
    """A JobRecord from what the epilog saw, for when the scheduler has forgotten the job."""
    def text(value: str | None) -> str | None:
        return value if value and "%" not in value else None  # unexpanded Slurm patterns are no path

    return JobRecord(
        job_id=job_id, name=text(event.job_name), user=text(event.user), partition=text(event.partition),
        state=event.state or "UNKNOWN", exit_code=event.exit_code, signal=event.signal,
        nodes=list(event.nodes), end_time=event.end_time,
        stdout_path=text(event.stdout), stderr_path=text(event.stderr), work_dir=text(event.work_dir),
        restart_count=event.restart_count, reason=event.scheduler_reason or "scheduler record unavailable",
    )


def _remediate(ctx, handle, job: JobRecord, event: JobEnded | None) -> FlowReport:
    evidence = gather_job_evidence(ctx, job, handle.id, event)
    verdict = classify_job(evidence)
    subject = IncidentSubject(kind="job", name=job.job_id, job=job, nodes=job.nodes, user=job.user,
                              faulty_nodes=evidence.faulty_nodes or None, suspect_nodes=evidence.suspect_nodes)
    return remediate(ctx, handle.id, subject, verdict, problems=evidence.problems + evidence.suspects.notes[:5],
                     ticket_evidence=evidence.model_dump(mode="json"), extra_notes=evidence.attribution_notes())
