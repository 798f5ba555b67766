"""`pitstop epilog` and `pitstop prolog`: what Slurm runs around every job.

The epilog never fails or delays a job: it spools the event to disk first, then tries to deliver
within a hard budget, and exits 0 whatever happens (a non-zero EpilogSlurmctld would only
confuse Slurm's logs; a non-zero slurmd Epilog drains the node). Undelivered events stay in the
spool for the next hook, `pitstop spool flush` or `pitstop up`. A spool that cannot be written
falls back to a private directory (pitstop/events/fallback.py), then to direct delivery; an
event that none of them takes is written whole into hooks.log. Ids from the environment are
validated first (pitstop/ids.py): none reaches scontrol's argv or a log line unchecked.

The prolog exits non-zero only when a node check says FAIL: Slurm then drains the node and
requeues the job. A Pitstop error in the prolog exits 0 (never drain a node because of us).

No typer, rich or prefect here: this module is the hooks' fast path (see pitstop/cli/entry.py).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path

from pitstop.events.deliver import DeliveryError, PrefectEventsClient, flush, resolve_api_url
from pitstop.events.fallback import usable_roots
from pitstop.events.hook_env import (
    HookEnvError,
    job_ended_from_env,
    prolog_facts,
    refine_from_scontrol,
)
from pitstop.events.models import NodeAlarm, WireEvent
from pitstop.events.spool import Spool, SpoolError
from pitstop.ids import escape_controls, is_valid, shown

PROLOG_FAIL_EXIT = 1
SCONTROL_TIMEOUT_S = 0.5
# Hooks get no PATH: where Slurm's tools usually live when slurm.bin_dir is not set.
SLURM_BIN_DIRS = ("/usr/bin", "/usr/local/bin", "/opt/slurm/bin", "/usr/local/slurm/bin")
HOOK_LOG_MAX_BYTES = 10 * 1024 * 1024
DELIVERY_GRACE_S = 0.2  # on top of the network timeout, for JSON and the spool moves


def _settings():
    """Settings, or defaults when the config is broken: a hook must still spool the event."""
    from pitstop.config import ConfigError, Settings, load_settings

    try:
        return load_settings(), None
    except (ConfigError, OSError, ValueError) as exc:
        return Settings.model_construct(), f"using defaults, settings unusable: {exc}"


def _append_line(path: Path, line: str) -> bool:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a busy cluster ends a job every second: keep this file and one older, bounded
        if path.exists() and path.stat().st_size > HOOK_LOG_MAX_BYTES:
            os.replace(path, path.with_name("hooks.log.1"))
        with open(path, "a", encoding="utf-8") as log:
            log.write(line)
        return True
    except OSError:
        return False


def hook_log(home: Path, message: str) -> None:
    """One line per hook run in PITSTOP_HOME/log/hooks.log (Slurm discards hook output), or in
    a fallback root's log/ when PITSTOP_HOME cannot be written. Control characters in the
    message are escaped: a newline inside an id from the environment cannot forge a line."""
    line = (f"{datetime.now(timezone.utc).isoformat(timespec='milliseconds')} pid={os.getpid()} "
            f"{escape_controls(message)}\n")
    if not _append_line(home / "log" / "hooks.log", line):
        for root in usable_roots(create=True):
            if _append_line(root / "log" / "hooks.log", line):
                break
    try:
        sys.stderr.write("pitstop: " + line)
    except (OSError, ValueError):
        pass


def deliver_within(spool: Spool, settings, budget_s: float) -> str:
    """Try to deliver what is spooled, giving up after `budget_s` whatever the network does."""
    api_url = resolve_api_url(settings.triggers.prefect_api_url)
    if not api_url:
        return "spooled; no Prefect API configured (set PREFECT_API_URL in the hook wrapper)"
    client = PrefectEventsClient(api_url, timeout_s=settings.triggers.deliver_timeout_s)

    def attempt() -> str:
        try:
            return flush(spool, client, keep_sent=settings.triggers.spool_keep_sent,
                         deadline=time.monotonic() + budget_s).summary
        except Exception as exc:  # the spool keeps it
            return f"delivery failed, event stays spooled: {type(exc).__name__}: {exc}"

    return _in_thread(budget_s, attempt, f"delivery still running after {budget_s:.1f} s; event stays spooled")


def _in_thread(budget_s: float, work: Callable[[], str], late: str) -> str:
    """`work()`'s text, or `late` if it has not answered within `budget_s` (daemon thread: even
    a hung DNS lookup cannot hold the hook)."""
    outcome: list[str] = []

    def attempt() -> None:
        try:
            outcome.append(work())
        except Exception as exc:  # the hook must not die on a deliverer bug
            outcome.append(f"{type(exc).__name__}: {exc}")

    worker = threading.Thread(target=attempt, name="pitstop-deliver", daemon=True)
    worker.start()
    worker.join(budget_s)
    return outcome[0] if outcome else late


def deliver_unspooled(event: WireEvent, settings, budget_s: float) -> str:
    """No spool could take the event: send it straight to Prefect. If that fails too, the line
    carries the whole event, so an operator can still send it by hand (never a silent drop)."""
    api_url = resolve_api_url(settings.triggers.prefect_api_url)
    lost = f"EVENT NOT SPOOLED AND NOT DELIVERED; the event: {event.model_dump_json()}"
    if not api_url:
        return f"no Prefect API configured; {lost}"
    client = PrefectEventsClient(api_url, timeout_s=settings.triggers.deliver_timeout_s)

    def send() -> str:
        try:
            client.send([event.to_api()])
        except DeliveryError as exc:
            return f"direct delivery failed ({exc}); {lost}"
        return f"delivered {event.id} directly to {api_url} (not spooled)"

    return _in_thread(budget_s, send, f"direct delivery did not answer within {budget_s:.1f} s; {lost}")


def spool_event(event: WireEvent, primary: Spool) -> tuple[Spool | None, Path | None, list[str]]:
    """Spool under PITSTOP_HOME, else under the first fallback root that takes it.
    Returns (spool used, file, why each earlier spool refused)."""
    refused: list[str] = []
    try:
        return primary, primary.write(event), refused
    except SpoolError as exc:
        refused.append(str(exc))
    for root in usable_roots(create=True):  # made only when needed: /tmp stays clean otherwise
        spool = Spool(root / "spool")
        try:
            return spool, spool.write(event), refused
        except SpoolError as exc:
            refused.append(str(exc))
    return None, None, refused


def spool_and_deliver(event: WireEvent, settings) -> str:
    budget = settings.triggers.deliver_timeout_s + DELIVERY_GRACE_S
    spool, path, refused = spool_event(event, Spool(settings.spool_dir))
    if spool is None:
        return f"NO SPOOL WRITABLE ({'; '.join(refused)}); " + deliver_unspooled(event, settings, budget)
    where = f"spooled {path.name}"
    if refused:
        where = f"spool unwritable ({refused[0]}); spooled to FALLBACK {path}"
    return f"{where}; " + deliver_within(spool, settings, budget)


def find_scontrol(bin_dir: Path | None) -> Path | None:
    for d in ([bin_dir] if bin_dir else []) + [Path(p) for p in SLURM_BIN_DIRS]:
        candidate = Path(d) / "scontrol"
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def confirm_with_scontrol(job, settings):
    """Return the job with its real outcome when scontrol knows better than the environment."""
    import subprocess

    if not is_valid("job id", job.job_id):  # JobEnded from the env is checked already; stay safe
        return job, f"job id {shown(job.job_id)} is not a Slurm job id; scontrol not asked"
    scontrol = find_scontrol(settings.slurm.bin_dir)
    if scontrol is None:
        return job, "scontrol not found; trusting the hook environment"
    try:
        proc = subprocess.run(
            [str(scontrol), "-o", "show", "job", job.job_id],
            capture_output=True, timeout=SCONTROL_TIMEOUT_S, stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return job, f"scontrol gave no answer ({type(exc).__name__}); trusting the environment"
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["?"]
        return job, f"scontrol failed ({err[0][:200]}); trusting the environment"
    refined = refine_from_scontrol(job, proc.stdout.decode("utf-8", "replace"))
    return refined, None


def run_epilog(env: Mapping[str, str] | None = None) -> int:
    """Always returns 0. Everything it knows goes to hooks.log."""
    env = os.environ if env is None else env
    started = time.monotonic()
    settings, warning = _settings()
    home = settings.home
    try:
        if warning:
            hook_log(home, f"epilog: {warning}")
        notes: list[str] = []
        job = job_ended_from_env(env, settings.slurm.cluster_name, notes)
        for note in notes:
            hook_log(home, f"epilog job={job.job_id}: {note}")
        if (
            job.state == "COMPLETED"
            and job.hook == "EpilogSlurmctld"
            and settings.triggers.confirm_success_with_scontrol
        ):
            job, note = confirm_with_scontrol(job, settings)
            if note:
                hook_log(home, f"epilog job={job.job_id}: {note}")
        if not job.is_failure and not settings.triggers.emit_success:
            message = "not emitted (job succeeded; set triggers.emit_success to emit)"
        else:
            message = spool_and_deliver(job.to_wire(), settings)
        hook_log(
            home,
            f"epilog job={job.job_id} state={job.state} exit={job.exit_code} signal={job.signal}: "
            f"{message} ({time.monotonic() - started:.3f} s)",
        )
    except HookEnvError as exc:
        hook_log(home, f"epilog: {exc}")
    except Exception as exc:  # never fail the job because of Pitstop
        hook_log(home, f"epilog error (job unaffected): {type(exc).__name__}: {exc}")
    return 0


NodeChecker = Callable[[list[str], float], "object"]


class ChecksTimedOut(TimeoutError):
    """The node checks did not finish within triggers.prolog_timeout_s."""


def default_node_checker(checks: list[str], timeout_s: float):
    """The node-check engine (pitstop.node.check) on the prolog's fast subset, time-bounded."""
    from pitstop.config import load_settings
    from pitstop.node.check import CheckContext, parse_check_names, run_checks

    settings = load_settings()
    names = parse_check_names(None, checks)
    result: list = []
    worker = threading.Thread(
        target=lambda: result.append(run_checks(names, CheckContext(settings))),
        name="pitstop-prolog-checks", daemon=True,
    )
    worker.start()
    worker.join(timeout_s)
    if not result:
        raise ChecksTimedOut(f"checks {', '.join(names)} did not finish within {timeout_s:.1f} s")
    return result[0]


def run_prolog(env: Mapping[str, str] | None = None, checker: NodeChecker | None = None) -> int:
    """0 when the node may run the job; PROLOG_FAIL_EXIT when a check FAILs (Slurm drains it)."""
    from pitstop.models import CheckStatus

    env = os.environ if env is None else env
    started = time.monotonic()
    settings, warning = _settings()
    home = settings.home
    notes: list[str] = []
    facts = prolog_facts(env, notes)
    node = facts["node"] or socket.gethostname().split(".")[0]
    try:
        if warning:
            hook_log(home, f"prolog: {warning}")
        for note in notes:
            hook_log(home, f"prolog node={node}: {note}")
        report = (checker or default_node_checker)(
            list(settings.triggers.prolog_checks), settings.triggers.prolog_timeout_s
        )
    except Exception as exc:
        hook_log(home, f"prolog node={node}: checks could not run, letting the job start: "
                       f"{type(exc).__name__}: {exc}")
        return 0
    if report.overall is not CheckStatus.FAIL:
        hook_log(home, f"prolog node={node} job={facts['job_id']}: {report.overall} "
                       f"({time.monotonic() - started:.3f} s)")
        return 0
    failed = [c for c in report.checks if c.status is CheckStatus.FAIL]
    summary = "; ".join(f"{c.name}: {c.summary}" for c in failed) or "node check failed"
    try:
        if not is_valid("node name", node):
            raise ValueError(f"this host's name {shown(node)} is not a valid node name; set SLURMD_NODENAME")
        alarm = NodeAlarm(
            cluster=str(facts["cluster"] or settings.slurm.cluster_name),
            node=node,
            alarm="prolog_failed",
            summary=summary[:500],
            job_id=facts["job_id"],
            restart_count=int(facts["restart_count"] or 0),
            details={
                "lines": [f"{c.name}: {c.summary}" for c in failed][:20],
                "report": report.model_dump(mode="json"),
            },
            source="prolog",
        )
        message = spool_and_deliver(alarm.to_wire(), settings)
    except Exception as exc:
        message = f"alarm not spooled: {type(exc).__name__}: {exc}"
    hook_log(home, f"prolog node={node} job={facts['job_id']}: FAIL ({summary}); {message} "
                   f"({time.monotonic() - started:.3f} s)")
    # slurmd logs the prolog's output; the line names what failed for the operator.
    print(f"pitstop prolog: node {node} failed checks: {summary}")
    return PROLOG_FAIL_EXIT
