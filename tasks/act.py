"""Execute planned actions on the cluster: one Prefect task per action kind.

Executors are a table (kind -> function). Each returns an `ActResult`; a scheduler error becomes
a failed result with the scheduler's message, never an exception out of the flow. `already_applied`
answers, after a crash between "intent" and "result", whether the cluster already shows the
action's effect, so a re-run confirms it instead of doing it twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prefect import task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, Field

from pitstop.cluster.base import ClusterError, HostStatus, InvalidIdentifier, JobChanges, JobRecord
from pitstop.models import CheckStatus
from pitstop.policy.decide import PlannedAction
from pitstop.policy.model import ActionKind
from tasks.context import PipelineContext
from tasks.evidence import parse_node_check


class ActResult(BaseModel):
    ok: bool
    summary: str
    details: dict = Field(default_factory=dict)
    not_done: bool = Field(default=False, description="deliberately not done (e.g. kept drained)")

    @property
    def state(self) -> str:
        """The journal state: a node kept drained after failed diagnostics is `skipped`, not
        `failed` - Pitstop did the right thing by not resuming it."""
        if self.not_done:
            return "skipped"
        return "done" if self.ok else "failed"


def _drain(ctx: PipelineContext, a: PlannedAction, facts: dict) -> ActResult:
    reason = a.reason or f"pitstop: drained by incident {facts.get('incident_id')}"
    ctx.scheduler.drain(a.target, reason)
    return ActResult(ok=True, summary=f"drained {a.target}: {reason}")


def _resume(ctx: PipelineContext, a: PlannedAction, facts: dict) -> ActResult:
    if a.after_diag_passes:
        diag = facts.get("diag", {}).get(a.target)
        if diag is None or not diag.get("passed"):
            why = "no diagnostics ran" if diag is None else f"diagnostics failed: {diag.get('summary')}"
            return ActResult(ok=True, not_done=True, summary=f"kept {a.target} drained: {why}")
    ctx.scheduler.resume(a.target)
    return ActResult(ok=True, summary=f"resumed {a.target}")


REBOOTING_FLAGS = frozenset({"REBOOT", "REBOOT_REQUESTED", "REBOOT_ISSUED"})


def _reboot(ctx: PipelineContext, a: PlannedAction, facts: dict) -> ActResult:
    """Request the reboot, then wait (pipeline.reboot_wait_s, 0 = do not wait) until the node is
    back: the check after a reboot must see the rebooted node, not one still going down."""
    ctx.scheduler.reboot(a.target, a.reason or "pitstop: reboot")
    wait_s = ctx.settings.pipeline.reboot_wait_s
    if wait_s <= 0:
        return ActResult(ok=True, summary=f"reboot of {a.target} requested (not waited for: pipeline.reboot_wait_s = 0)")
    deadline = time.monotonic() + wait_s
    info = ctx.scheduler.node(a.target)
    while REBOOTING_FLAGS & set(info.flags) and time.monotonic() < deadline:
        time.sleep(ctx.settings.pipeline.reboot_poll_s)
        info = ctx.scheduler.node(a.target)
    state = "+".join([info.state, *info.flags])
    if REBOOTING_FLAGS & set(info.flags) or "reboot timed out" in (info.reason or ""):
        return ActResult(ok=False, summary=f"{a.target} did not come back from its reboot within {wait_s:g} s (state {state})")
    if info.is_down:
        return ActResult(ok=False, summary=f"{a.target} is {state} after its reboot")
    return ActResult(ok=True, summary=f"rebooted {a.target} (state {state})")


def _gpu_reset(ctx: PipelineContext, a: PlannedAction, facts: dict) -> ActResult:
    result = ctx.runner.run(a.target, ["nvidia-smi", "--gpu-reset"], ctx.settings.pipeline.node_check_timeout_s)
    ok = result.status is HostStatus.OK and result.exit_code == 0  # SSH answers OK for a failed command
    detail = (result.stdout or result.stderr or result.error or "").strip()[:300]
    return ActResult(ok=ok, summary=f"GPU reset on {a.target} {'done' if ok else 'failed'}: {detail}")


def _requeue(ctx: PipelineContext, a: PlannedAction, facts: dict) -> ActResult:
    """Held, changed, released in one scheduler call (or resubmitted, for env changes). After a
    crash, a job this action held is finished (update + release), not requeued again."""
    in_doubt = facts.get("in_doubt", {}).get(a.seq)
    resume = in_doubt is not None and _held_by_this_action(ctx.scheduler.job(a.target), in_doubt)
    result = ctx.scheduler.requeue_with_changes(
        a.target, a.job_changes or JobChanges(), incident_id=facts.get("incident_id"), resume_held=resume
    )
    return ActResult(ok=True, summary=result.summary, details=result.model_dump(mode="json"))


def _held_by_this_action(job: JobRecord, intent: dict) -> bool:
    """Held now, and not before the action: requeuehold bumped its restart count, or the hold
    of a pending job is new. A hold that was there before belongs to someone else."""
    before = intent.get("restart_count_before")
    if not job.is_held or before is None:
        return False
    # an intent without held_before (an older Pitstop) never held a pending job
    return job.restart_count > int(before) or intent.get("held_before") is False


def _diag(ctx: PipelineContext, a: PlannedAction, facts: dict) -> ActResult:
    """DCGM diag at the policy's level, then the node check (NVML, Xid, InfiniBand, disk).
    Passed = both pass; without DCGM on the node the node check alone decides (and says so)."""
    level = a.diag_level or 1
    p = ctx.settings.pipeline
    result = ctx.runner.run(a.target, ["dcgmi", "diag", "-r", str(level)], max(p.node_check_timeout_s, 120.0 * level))
    check = ctx.runner.run(a.target, p.node_check_argv, p.node_check_timeout_s)
    report, why = parse_node_check(check.stdout, check.status, check.error)
    check_ok = report is not None and report.overall is not CheckStatus.FAIL
    failing = [f"{c.name}: {c.summary}" for c in (report.checks if report else []) if c.status is CheckStatus.FAIL]
    check_text = f"node check {report.overall}" + (f" ({'; '.join(failing)})" if failing else "") if report else f"node check unavailable: {why}"
    missing = result.exit_code == 127 or bool(result.error and "not found" in result.error)
    if missing:
        # The quick node check can stand in for level 1 only; a sticky fault's level 3 cannot be
        # vouched for without DCGM, so the node stays out for a human.
        passed, tool = check_ok and level <= 1, "node-check"
        dcgm_text = f"DCGM unavailable on {a.target}" + ("" if level <= 1 else f": level {level} diagnostics could not run")
    else:
        dcgm_ok = result.status is HostStatus.OK and result.exit_code == 0
        passed, tool = dcgm_ok and check_ok, "dcgmi+node-check"
        dcgm_text = f"dcgmi diag -r {level} on {a.target}: {'passed' if dcgm_ok else 'FAILED'}"
    summary = f"{dcgm_text}; {check_text}"
    could_not_run = missing and level > 1 and check_ok
    if a.diag_checks:
        burn_ok, burn_unrun, burn_text, burn_failing = _burn_in(ctx, a)
        passed, summary, failing = passed and burn_ok, f"{summary}; {burn_text}", failing + burn_failing
        could_not_run = could_not_run or (burn_unrun and check_ok)
    details = {"passed": passed, "summary": summary, "tool": tool, "level": level,
               # no DCGM for a deep level and the quick check found nothing: unproven either way
               "could_not_run": could_not_run, "burn_in_checks": a.diag_checks,
               "dcgm_output": (result.stdout or "")[-4000:], "failing_checks": failing}
    facts.setdefault("diag", {})[a.target] = details
    return ActResult(ok=True, summary=summary, details=details)


def _burn_in(ctx: PipelineContext, a: PlannedAction) -> tuple[bool, bool, str, list[str]]:
    """The diag's extra checks (e.g. nccl) as `node-check --checks`, with their own, longer time
    limit. (passed, could not run, text, failing). A burn-in that could not run (no nccl-tests on
    the node) proves nothing, so the node does not pass: a person decides, as for DCGM level 3."""
    p = ctx.settings.pipeline
    names = ",".join(a.diag_checks)
    timeout_s = max(p.node_check_timeout_s, ctx.settings.burn_in.timeout_s + 60.0)
    run = ctx.runner.run(a.target, [*p.node_check_argv, "--checks", names], timeout_s)
    report, why = parse_node_check(run.stdout, run.status, run.error)
    if report is None:
        return False, False, f"burn-in ({names}) unavailable: {why}", []
    failing = [f"{c.name}: {c.summary}" for c in report.checks if c.status is CheckStatus.FAIL]
    unrun = [f"{c.name}: {c.summary}" for c in report.checks if c.status is CheckStatus.UNAVAILABLE]
    if failing:
        return False, False, f"burn-in FAILED ({'; '.join(failing)})", failing
    if unrun:
        return False, True, f"burn-in could not run ({'; '.join(unrun)})", []
    return True, False, f"burn-in passed ({'; '.join(c.summary for c in report.checks)})"[:800], []


def _noop(ctx: PipelineContext, a: PlannedAction, facts: dict) -> ActResult:
    return ActResult(ok=True, summary="nothing to do")


EXECUTORS: dict[ActionKind, Callable[[PipelineContext, PlannedAction, dict], ActResult]] = {
    ActionKind.DRAIN: _drain,
    ActionKind.RESUME: _resume,
    ActionKind.REBOOT: _reboot,
    ActionKind.GPU_RESET: _gpu_reset,
    ActionKind.REQUEUE: _requeue,
    ActionKind.DIAG: _diag,
    ActionKind.NONE: _noop,
}


def _make_task(kind: ActionKind, fn):
    @task(name=f"act-{kind.value}", cache_policy=NO_CACHE, task_run_name=f"{kind.value}-{{action.target}}")
    def act(ctx: PipelineContext, action: PlannedAction, facts: dict) -> ActResult:
        try:
            return fn(ctx, action, facts)
        except (ClusterError, InvalidIdentifier, OSError) as exc:
            return ActResult(ok=False, summary=f"{kind.value} {action.target} failed: {exc}")

    return act


ACT_TASKS = {kind: _make_task(kind, fn) for kind, fn in EXECUTORS.items()}


def already_applied(ctx: PipelineContext, action: PlannedAction, intent_params: dict) -> bool | None:
    """After a crash mid-action: does the cluster already show it? None = cannot tell."""
    try:
        if action.kind is ActionKind.DRAIN:
            info = ctx.scheduler.node(action.target)
            return info.is_drained and (info.reason or "") == (action.reason or "")
        if action.kind is ActionKind.RESUME:
            return not ctx.scheduler.node(action.target).is_drained
        if action.kind is ActionKind.REQUEUE:
            return _requeue_applied(ctx, action, intent_params)
    except (ClusterError, ValueError):
        return None
    return None


def _requeue_applied(ctx: PipelineContext, action: PlannedAction, intent: dict) -> bool | None:
    """Done = resubmitted (a tagged job exists), or released with the changes in place. A job
    still held by this action is not done: the re-run finishes update + release."""
    changes = action.job_changes or JobChanges()
    if changes.env:
        # one Pitstop resubmission per job at most: the replaced job never runs again
        return ctx.scheduler.find_resubmission(action.target) is not None
    before = intent.get("restart_count_before")
    if before is None:
        return None
    job = ctx.scheduler.job(action.target)
    if job.is_held:
        return False
    acted = job.restart_count > int(before) or intent.get("state_before") == "PENDING"
    return acted and set(changes.exclude_nodes) <= set(job.excluded_nodes) and (
        not changes.time_limit_min or job.time_limit_min == changes.time_limit_min)


def intent_params(ctx: PipelineContext, action: PlannedAction) -> dict:
    """What to remember before acting, so a re-run can tell whether the action happened: for a
    requeue, the job's restart count and whether it was held or pending already."""
    params = action.model_dump(mode="json", exclude_none=True)
    if action.kind is ActionKind.REQUEUE:
        try:
            job = ctx.scheduler.job(action.target)
        except (ClusterError, ValueError):
            return params
        params.update(restart_count_before=job.restart_count, held_before=job.is_held, state_before=job.state)
    return params
