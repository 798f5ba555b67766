"""Read a Slurm hook's environment into a `JobEnded` / the facts of a prolog. Pure: no I/O.

Facts measured on Slurm 22.05: EpilogSlurmctld sees SLURM_JOB_EXIT_CODE=768 (the raw wait()
status) and SLURM_JOB_EXIT_CODE2=3:0 (exit:signal); slurmd's Epilog sees only the raw status and
SLURMD_NODENAME. Neither sees the final job state, so it is derived here and re-read by the flow.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone

from pitstop.cluster.hostlist import HostlistError, expand
from pitstop.events.models import JobEnded
from pitstop.ids import is_valid, shown

MAX_VALUE_CHARS = 4096  # an env value is a fact, not a log: keep spool files small

# How (exit code, signal) map to a state when Slurm does not tell us. Order matters: first match.
STATE_RULES: tuple[tuple[str, str], ...] = (
    ("signal", "SIGNALED"),  # scancel, TIMEOUT, node loss or a crash: the flow tells them apart
    ("exit_code", "FAILED"),
)


class HookEnvError(ValueError):
    """The hook environment lacks what Slurm always sets; says which variable."""


def clean(value: str | None) -> str | None:
    """Env values may hold undecodable bytes (surrogate-escaped): make them valid, bounded text."""
    if value is None:
        return None
    text = value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return text[:MAX_VALUE_CHARS]


def _int(value: str | None) -> int | None:
    try:
        return int(value.strip()) if value is not None else None
    except ValueError:
        return None


def decode_wait_status(status: int | None) -> tuple[int | None, int | None]:
    """POSIX wait() status -> (exit code, signal). 768 -> (3, 0); 9 -> (0, 9)."""
    if status is None or status < 0:
        return None, None
    return (status >> 8) & 0xFF, status & 0x7F


def exit_and_signal(env: Mapping[str, str]) -> tuple[int | None, int | None]:
    pair = env.get("SLURM_JOB_EXIT_CODE2")
    if pair and ":" in pair:
        code, sig = (_int(p) for p in pair.split(":", 1))
        if code is not None and sig is not None:
            return code, sig
    return decode_wait_status(_int(env.get("SLURM_JOB_EXIT_CODE")))


def derive_state(exit_code: int | None, signal: int | None) -> str:
    if exit_code is None and signal is None:
        return "UNKNOWN"  # treated as a failure: the flow reads the real record and decides
    facts = {"exit_code": exit_code or 0, "signal": signal or 0}
    for field, state in STATE_RULES:
        if facts[field]:
            return state
    return "COMPLETED"


def _epoch(value: str | None) -> datetime | None:
    seconds = _int(value)
    if seconds is None or seconds <= 0:
        return None
    try:
        return datetime.fromtimestamp(seconds, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def valid_or_none(kind: str, value: str | None, variable: str, notes: list[str] | None) -> str | None:
    """An optional id from the environment: kept when valid, else dropped with a note for the log
    (it never reaches scontrol's argv, an apprise URL or a log line as it came)."""
    if value is None or value == "" or is_valid(kind, value):
        return value or None
    if notes is not None:
        notes.append(f"ignored {variable}={shown(value)}: not a valid {kind}")
    return None


def job_id_from_env(env: Mapping[str, str]) -> str:
    """SLURM_JOB_ID, validated: `--help` or '1234\n' must not reach `scontrol show job`."""
    job_id = clean(env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID"))
    if not job_id or not job_id.strip():
        raise HookEnvError(
            "SLURM_JOB_ID is not set: `pitstop epilog` must be run by Slurm as EpilogSlurmctld "
            "or Epilog (or with SLURM_JOB_ID and SLURM_JOB_EXIT_CODE set by hand)"
        )
    if not is_valid("job id", job_id.strip(" ")):
        raise HookEnvError(f"SLURM_JOB_ID={shown(job_id)} is not a Slurm job id; no event emitted")
    return job_id.strip(" ")


def job_ended_from_env(env: Mapping[str, str], cluster: str, notes: list[str] | None = None) -> JobEnded:
    """The event of this hook run. Ids that are not what Slurm would give are refused (job id)
    or dropped (cluster, user, node names), each with a line in `notes`."""
    job_id = job_id_from_env(env)
    exit_code, signal = exit_and_signal(env)
    nodelist = clean(env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST"))
    try:
        nodes = expand(nodelist) if nodelist and nodelist != "(null)" else []
    except HostlistError:
        nodes = []  # keep the raw nodelist in the payload; the flow reads the job record
    bad_nodes = [n for n in nodes if not is_valid("node name", n)]
    if bad_nodes:
        nodes = [n for n in nodes if n not in bad_nodes]
        if notes is not None:
            notes.append(f"ignored {len(bad_nodes)} node name(s) in SLURM_JOB_NODELIST such as "
                         f"{shown(bad_nodes[0])}: not valid node names")
    if not nodes and env.get("SLURMD_NODENAME"):
        node = valid_or_none("node name", clean(env["SLURMD_NODENAME"]), "SLURMD_NODENAME", notes)
        nodes = [node] if node else []
    derived_code, _ = decode_wait_status(_int(env.get("SLURM_JOB_DERIVED_EC")))
    hook = "Epilog" if env.get("SLURMD_NODENAME") else "EpilogSlurmctld"
    return JobEnded(
        cluster=valid_or_none("cluster name", clean(env.get("SLURM_CLUSTER_NAME")), "SLURM_CLUSTER_NAME", notes)
        or cluster,
        job_id=job_id,
        state=derive_state(exit_code, signal),
        exit_code=exit_code,
        signal=signal,
        derived_exit_code=derived_code,
        user=valid_or_none("user name", clean(env.get("SLURM_JOB_USER")), "SLURM_JOB_USER", notes),
        job_name=clean(env.get("SLURM_JOB_NAME")),
        partition=clean(env.get("SLURM_JOB_PARTITION")),
        nodelist=nodelist,
        nodes=nodes,
        restart_count=_int(env.get("SLURM_JOB_RESTART_COUNT") or env.get("SLURM_RESTART_COUNT"))
        or 0,
        stdout=clean(env.get("SLURM_JOB_STDOUT")),
        stderr=clean(env.get("SLURM_JOB_STDERR")),
        work_dir=clean(env.get("SLURM_JOB_WORK_DIR")),
        end_time=_epoch(env.get("SLURM_JOB_END_TIME")),
        hook=hook,
    )


def prolog_facts(env: Mapping[str, str], notes: list[str] | None = None) -> dict[str, str | int | None]:
    """Which node and job a prolog runs for. Node falls back to the host name in the caller.
    Ids that are not what Slurm would give are dropped, each with a line in `notes`."""
    return {
        "node": valid_or_none("node name", clean(env.get("SLURMD_NODENAME")), "SLURMD_NODENAME", notes),
        "job_id": valid_or_none("job id", clean(env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")),
                                "SLURM_JOB_ID", notes),
        "user": valid_or_none("user name", clean(env.get("SLURM_JOB_USER")), "SLURM_JOB_USER", notes),
        "cluster": valid_or_none("cluster name", clean(env.get("SLURM_CLUSTER_NAME")), "SLURM_CLUSTER_NAME", notes),
        "restart_count": _int(env.get("SLURM_JOB_RESTART_COUNT") or env.get("SLURM_RESTART_COUNT"))
        or 0,
    }


# EpilogSlurmctld says 0:0 for a TIMEOUT and for a scancel (recorded on 22.05), but
# `scontrol -o show job` run from the hook already has the final Reason and ExitCode (JobState
# is still COMPLETING). Reason -> the state the job will end in; first match wins.
REASON_STATES: dict[str, str] = {
    "TimeLimit": "TIMEOUT",
    "Deadline": "DEADLINE",
    "NodeDown": "NODE_FAIL",
    "NodeFail": "NODE_FAIL",
    "OutOfMemory": "OUT_OF_MEMORY",
    "NonZeroExitCode": "FAILED",
    "RaisedSignal": "SIGNALED",
}


def refine_from_scontrol(job: JobEnded, scontrol_text: str) -> JobEnded:
    """A job the environment calls COMPLETED, corrected by what `scontrol -o show job` says."""
    fields = dict(
        part.split("=", 1) for part in scontrol_text.split() if "=" in part and not part.startswith("=")
    )
    reason = fields.get("Reason", "")
    code, sig = job.exit_code, job.signal
    if ":" in fields.get("ExitCode", ""):
        parsed = [_int(p) for p in fields["ExitCode"].split(":", 1)]
        if None not in parsed:
            code, sig = parsed
    state = REASON_STATES.get(reason) or derive_state(code, sig)
    if state == job.state:
        return job
    return job.model_copy(update={"state": state, "exit_code": code, "signal": sig,
                                  "scheduler_reason": reason or None})
