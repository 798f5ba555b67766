"""Pure parsers for what Slurm's tools print. No I/O: text in, pydantic models out.

Formats handled (recorded from Slurm 22.05 under tests/fixtures/slurm/):
- `sinfo --json` / `squeue --json` (openapi v0.0.38: node `state` is a string and
  `state_flags` a list; 23.x+ gives `state` as a list whose first item is the base state, and
  wraps numbers as {"set": bool, "infinite": bool, "number": N}: both are read).
- `scontrol -o show node|job`: one record per line of Key=Value pairs; values may contain spaces.
- `sacct -P --noheader --format=<SACCT_FIELDS>`.
Anything truncated, empty where it must not be, or not in these formats raises SlurmParseError.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from pitstop.cluster.base import ClusterError, JobRecord, NodeInfo
from pitstop.cluster.hostlist import HostlistError, expand


class SlurmParseError(ClusterError):
    """Slurm printed something this parser cannot read (truncated, garbage, unknown format)."""


# Base node states; everything else in a state string or list is a flag.
_BASE_STATES = {"UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE", "ALLOC", "MIX"}
_STATE_ALIASES = {"ALLOC": "ALLOCATED", "MIX": "MIXED"}
# scontrol appends these to a node state: '*' not responding, '~' powered off, '#' powering up,
# '%' powering down, '$' maintenance reservation, '@' reboot pending, '^' reboot issued,
# '-' planned by backfill, '!' pending power down
_STATE_SUFFIX_FLAGS = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "%": "POWERING_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
    "!": "POWER_DOWN",
}
_NULLS = {"", "(null)", "None", "N/A", "n/a", "Unknown"}

# Fields asked of sacct. SubmitLine is last because it may itself contain '|'.
SACCT_FIELDS = (
    "JobIDRaw",
    "JobName",
    "User",
    "Partition",
    "State",
    "ExitCode",
    "NodeList",
    "Submit",
    "Start",
    "End",
    "TimelimitRaw",
    "WorkDir",
    "Reason",
    "SubmitLine",
)

_SCONTROL_KEY = re.compile(r"(?:^|(?<= ))([A-Za-z][A-Za-z0-9_/:]*)=")
# `scontrol -o show node` prints the free-text Reason last; it may hold ' ' and '=', so it runs
# to the end of the line. (A job's Reason is a single word and is followed by other keys.)
_NODE_REST_OF_LINE_KEYS = frozenset({"Reason"})
_REASON_STAMP = re.compile(r"^(?P<text>.*?)\s*\[(?P<user>[^@\]]+)@(?P<time>[0-9T:-]+)\]$")


# ------------------------------------------------------------------------------- small helpers


def exit_from_wait_status(raw: Any) -> tuple[int | None, int | None]:
    """squeue's `exit_code` is a raw wait() status: 768 -> exit 3; 9 -> killed by signal 9."""
    if isinstance(raw, dict) and "number" not in raw:
        # 23.x+: {"status": [...], "return_code": N, "signal": {"id": N, ...}}
        code = _number(raw.get("return_code"))
        sig = raw.get("signal") or {}
        signal = _number(sig.get("id") if isinstance(sig, dict) else sig)
        return (code, signal or None)
    status = _number(raw)
    if status is None:
        return (None, None)
    if status < 0 or status > 0xFFFF:
        raise SlurmParseError(f"exit status {raw!r} is not a wait() status")
    signal = status & 0x7F
    if signal:
        return (None, signal)
    return (status >> 8, None)


def split_exit_code(text: str) -> tuple[int | None, int | None]:
    """scontrol/sacct `ExitCode=3:0` -> (3, None); `0:9` (killed by SIGKILL) -> (None, 9)."""
    if text is None or text.strip() in _NULLS:
        return (None, None)
    match = re.fullmatch(r"\s*(\d+):(\d+)\s*", text)
    if not match:
        raise SlurmParseError(f"cannot read exit code {text!r} (expected EXIT:SIGNAL)")
    code, signal = int(match.group(1)), int(match.group(2))
    if signal:
        return (code or None, signal)
    return (code, None)


def parse_time_limit(text: str | None) -> int | None:
    """Slurm time limit -> minutes (rounded up). UNLIMITED/empty -> None.

    Accepts MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
    """
    if text is None:
        return None
    value = text.strip()
    if value in _NULLS or value.upper() in {"UNLIMITED", "INFINITE", "PARTITION_LIMIT"}:
        return None
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", value)
    if not match:
        raise SlurmParseError(f"cannot read time limit {text!r}")
    days = int(match.group(1) or 0)
    parts = [int(p) for p in match.groups()[1:] if p is not None]
    if match.group(1) is not None:  # D-HH[:MM[:SS]]
        hours, minutes, seconds = (parts + [0, 0])[:3]
    elif len(parts) == 3:
        hours, minutes, seconds = parts
    elif len(parts) == 2:
        hours, (minutes, seconds) = 0, parts
    else:
        hours, minutes, seconds = 0, parts[0], 0
    total_s = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    return -(-total_s // 60)


def parse_slurm_time(text: str | None) -> datetime | None:
    """scontrol/sacct local time `2026-12-02T15:28:23` -> aware UTC datetime."""
    if text is None or text.strip() in _NULLS or text.strip() == "0":
        return None
    try:
        local = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise SlurmParseError(f"cannot read time {text!r}") from exc
    return local.astimezone(UTC) if local.tzinfo else local.astimezone().astimezone(UTC)


def _epoch(value: Any) -> datetime | None:
    number = _number(value)
    if not number:  # Slurm uses 0 for "not yet"
        return None
    return datetime.fromtimestamp(number, tz=UTC)


def _number(value: Any) -> int | None:
    """A plain number, or 23.x+'s {"set": true, "infinite": false, "number": N}."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise SlurmParseError(f"expected a number, got {value!r}")


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return None if text in _NULLS else text


def _hosts(value: Any) -> list[str]:
    text = _text(value)
    if not text:
        return []
    try:
        return expand(text)
    except HostlistError as exc:
        raise SlurmParseError(f"bad node list from Slurm: {exc}") from exc


def split_node_state(state: Any, extra_flags: Any = None) -> tuple[str, list[str]]:
    """'IDLE+DRAIN' | 'idle' + ['DRAIN'] | ['IDLE', 'DRAIN'] | 'DOWN*' -> ('IDLE', ['DRAIN'])."""
    if isinstance(state, list):
        tokens = [str(s) for s in state]
    elif isinstance(state, str):
        tokens = state.split("+")
    else:
        raise SlurmParseError(f"node state must be text or a list, got {state!r}")
    tokens = [t.strip().upper() for t in tokens if t.strip()]
    if not tokens:
        raise SlurmParseError("node has an empty state")
    flags: list[str] = []
    cleaned = []
    for token in tokens:
        while token and token[-1] in _STATE_SUFFIX_FLAGS:
            flags.append(_STATE_SUFFIX_FLAGS[token[-1]])
            token = token[:-1]
        if token:
            cleaned.append(token)
    base = next((t for t in cleaned if t in _BASE_STATES), cleaned[0] if cleaned else "UNKNOWN")
    flags = [t for t in cleaned if t != base] + flags
    if extra_flags:
        if not isinstance(extra_flags, list):
            raise SlurmParseError(f"node state_flags must be a list, got {extra_flags!r}")
        flags += [str(f).upper() for f in extra_flags if str(f).upper() not in flags]
    return (_STATE_ALIASES.get(base, base), flags)


def _load_json(text: str | bytes, tool: str, key: str) -> list[dict]:
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not text or not text.strip():
        raise SlurmParseError(f"{tool} --json printed nothing")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmParseError(
            f"{tool} --json printed invalid JSON ({exc.msg} at line {exc.lineno}); "
            "output truncated or not JSON"
        ) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        raise SlurmParseError(f"{tool} --json output has no {key!r} list; not a Slurm {tool} document")
    errors = doc.get("errors") or []
    if errors:
        raise SlurmParseError(f"{tool} --json reported errors: {errors!r}"[:500])
    items = doc[key]
    if not all(isinstance(item, dict) for item in items):
        raise SlurmParseError(f"{tool} --json {key!r} holds non-objects")
    return items


# ------------------------------------------------------------------------------- sinfo / squeue


def parse_sinfo_json(text: str | bytes) -> list[NodeInfo]:
    nodes = []
    for item in _load_json(text, "sinfo", "nodes"):
        try:
            name = item["name"]
            state, flags = split_node_state(item["state"], item.get("state_flags"))
        except KeyError as exc:
            raise SlurmParseError(f"sinfo --json node without {exc.args[0]!r}") from exc
        nodes.append(
            NodeInfo(
                name=str(name),
                state=state,
                flags=flags,
                reason=_text(item.get("reason")),
                reason_user=_text(item.get("reason_set_by_user")),
                reason_time=_epoch(item.get("reason_changed_at")),
                partitions=[str(p) for p in item.get("partitions") or []],
                gres=_text(item.get("gres")),
                cpus=_number(item.get("cpus")),
            )
        )
    return nodes


def parse_squeue_json(text: str | bytes) -> list[JobRecord]:
    jobs = []
    for item in _load_json(text, "squeue", "jobs"):
        try:
            job_id = _number(item["job_id"])
            state = item["job_state"]
        except KeyError as exc:
            raise SlurmParseError(f"squeue --json job without {exc.args[0]!r}") from exc
        if isinstance(state, list):  # 23.x+
            state = state[0] if state else "UNKNOWN"
        array_task = _number(item.get("array_task_id"))
        array_job = _number(item.get("array_job_id"))
        shown_id = f"{array_job}_{array_task}" if array_job and array_task is not None else str(job_id)
        exit_code, signal = exit_from_wait_status(item.get("exit_code"))
        jobs.append(
            JobRecord(
                job_id=shown_id,
                name=_text(item.get("name")),
                user=_text(item.get("user_name")),
                partition=_text(item.get("partition")),
                state=str(state).upper(),
                exit_code=exit_code,
                signal=signal,
                nodes=_hosts(item.get("nodes")),
                submit_time=_epoch(item.get("submit_time")),
                start_time=_epoch(item.get("start_time")),
                end_time=_epoch(item.get("end_time")),
                time_limit_min=_number(item.get("time_limit")),
                # squeue shows the unexpanded pattern (slurm-%j.out); scontrol has the real path
                stdout_path=_text(item.get("standard_output")),
                stderr_path=_text(item.get("standard_error")),
                work_dir=_text(item.get("current_working_directory")),
                restart_count=_number(item.get("restart_cnt")) or 0,
                command=_text(item.get("command")),
                excluded_nodes=_hosts(item.get("excluded_nodes")),
                reason=_text(item.get("state_reason")),
            )
        )
    return jobs


# ------------------------------------------------------------------------------- scontrol -o


def parse_scontrol_records(
    text: str | bytes, rest_of_line: frozenset[str] = frozenset()
) -> list[dict[str, str]]:
    """`scontrol -o show ...` -> one dict per non-empty line. Values keep their inner spaces.

    A key in `rest_of_line` takes everything after it, '=' included.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        keys = list(_SCONTROL_KEY.finditer(line))
        if not keys or keys[0].start() != 0:
            raise SlurmParseError(f"scontrol line {number} is not Key=Value text: {line[:120]!r}")
        record: dict[str, str] = {}
        for i, match in enumerate(keys):
            key = match.group(1)
            if key in rest_of_line:
                record[key] = line[match.end() :].strip()
                break
            end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
            record.setdefault(key, line[match.end() : end].strip())
        records.append(record)
    return records


def _node_from_record(record: dict[str, str]) -> NodeInfo:
    name = record.get("NodeName")
    if not name or "State" not in record:
        raise SlurmParseError(f"scontrol node record without NodeName/State: {sorted(record)[:8]}")
    state, flags = split_node_state(record["State"])
    reason, user, when = _text(record.get("Reason")), None, None
    if reason:
        stamp = _REASON_STAMP.match(reason)
        if stamp:
            reason, user = stamp.group("text"), stamp.group("user")
            when = parse_slurm_time(stamp.group("time"))
    cpus = record.get("CPUTot")
    return NodeInfo(
        name=name,
        state=state,
        flags=flags,
        reason=reason,
        reason_user=user,
        reason_time=when,
        partitions=[p for p in (_text(record.get("Partitions")) or "").split(",") if p],
        gres=_text(record.get("Gres")),
        cpus=int(cpus) if cpus and cpus.isdigit() else None,
    )


def parse_scontrol_nodes(text: str | bytes) -> list[NodeInfo]:
    return [_node_from_record(r) for r in parse_scontrol_records(text, _NODE_REST_OF_LINE_KEYS)]


def _job_from_record(record: dict[str, str]) -> JobRecord:
    job_id = record.get("JobId")
    if not job_id or "JobState" not in record:
        raise SlurmParseError(f"scontrol job record without JobId/JobState: {sorted(record)[:8]}")
    array_job, array_task = record.get("ArrayJobId"), record.get("ArrayTaskId")
    if array_job and array_task and array_task.isdigit():
        job_id = f"{array_job}_{array_task}"
    exit_code, signal = split_exit_code(record.get("ExitCode", ""))
    user = _text(record.get("UserId"))
    restarts = record.get("Restarts", "0")
    return JobRecord(
        job_id=job_id,
        name=_text(record.get("JobName")),
        user=user.split("(", 1)[0] if user else None,
        partition=_text(record.get("Partition")),
        state=record["JobState"].upper(),
        exit_code=exit_code,
        signal=signal,
        nodes=_hosts(record.get("NodeList")),
        submit_time=parse_slurm_time(record.get("SubmitTime")),
        # a pending job's StartTime/EndTime are Slurm's forecasts; only report what happened
        start_time=None if record["JobState"] == "PENDING" else parse_slurm_time(record.get("StartTime")),
        end_time=None
        if record["JobState"] in {"PENDING", "RUNNING"}
        else parse_slurm_time(record.get("EndTime")),
        time_limit_min=parse_time_limit(record.get("TimeLimit")),
        stdout_path=_text(record.get("StdOut")),
        stderr_path=_text(record.get("StdErr")),
        work_dir=_text(record.get("WorkDir")),
        restart_count=int(restarts) if restarts.isdigit() else 0,
        command=_text(record.get("Command")),
        submit_line=_text(record.get("SubmitLine")),  # Slurm 23.02+ prints it
        excluded_nodes=_hosts(record.get("ExcNodeList")),
        reason=_text(record.get("Reason")),
    )


def parse_scontrol_jobs(text: str | bytes) -> list[JobRecord]:
    return [_job_from_record(r) for r in parse_scontrol_records(text)]


# ------------------------------------------------------------------------------- sacct -P


def parse_sacct(text: str | bytes, fields: tuple[str, ...] = SACCT_FIELDS) -> list[JobRecord]:
    """`sacct -P --noheader --format=<fields>` -> one record per job allocation (steps skipped)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    jobs = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        values = line.split("|")
        if len(values) < len(fields):
            raise SlurmParseError(
                f"sacct line {number} has {len(values)} fields, expected {len(fields)} "
                f"(truncated?): {line[:120]!r}"
            )
        # the last field (SubmitLine) may itself contain '|'
        values = values[: len(fields) - 1] + ["|".join(values[len(fields) - 1 :])]
        row = dict(zip(fields, values))
        raw_id = row.get("JobIDRaw", "")
        if "." in raw_id:  # a step (123.batch, 123.0): the allocation line carries the job's facts
            continue
        if not re.fullmatch(r"[0-9]+([_+][0-9]+)?", raw_id):
            raise SlurmParseError(f"sacct line {number} has no job id: {line[:120]!r}")
        state = (row.get("State") or "").split(" ")[0].upper()  # 'CANCELLED by 0'
        if not state:
            raise SlurmParseError(f"sacct line {number} has no State: {line[:120]!r}")
        exit_code, signal = split_exit_code(row.get("ExitCode", ""))
        limit = _text(row.get("TimelimitRaw"))
        jobs.append(
            JobRecord(
                job_id=raw_id,
                name=_text(row.get("JobName")),
                user=_text(row.get("User")),
                partition=_text(row.get("Partition")),
                state=state,
                exit_code=exit_code,
                signal=signal,
                nodes=_hosts(row.get("NodeList")) if row.get("NodeList") != "None assigned" else [],
                submit_time=parse_slurm_time(row.get("Submit")),
                start_time=parse_slurm_time(row.get("Start")),
                end_time=parse_slurm_time(row.get("End")),
                time_limit_min=int(limit) if limit and limit.isdigit() else parse_time_limit(limit),
                work_dir=_text(row.get("WorkDir")),
                submit_line=_text(row.get("SubmitLine")),
                reason=_text(row.get("Reason")),
            )
        )
    return jobs


# ------------------------------------------------------------------------------- topology


def parse_scontrol_topology(text: str | bytes) -> dict[str, list[str]]:
    """`scontrol show topology` (topology/tree plugin) -> leaf switch -> its nodes.

    Lines are `SwitchName=s0 Level=0 LinkSpeed=1 Nodes=gpu[01-32]` (https://slurm.schedmd.com/
    topology.conf.html): level 0 switches are the leaves the nodes are cabled to; upper levels
    list `Switches=` (and, in newer releases, every node below them too), so only level 0 is kept.
    No topology plugin prints nothing on stdout: an empty map, not an error."""
    leaves: dict[str, list[str]] = {}
    for record in parse_scontrol_records(text):
        name = record.get("SwitchName")
        if not name:
            raise SlurmParseError(f"scontrol topology record without SwitchName: {sorted(record)[:8]}")
        level = record.get("Level")
        is_leaf = level == "0" if level is not None else "Switches" not in record
        if not is_leaf or not record.get("Nodes"):
            continue
        try:
            leaves[name] = expand(record["Nodes"])
        except HostlistError as exc:
            raise SlurmParseError(f"switch {name}: cannot read its node list {record['Nodes']!r}: {exc}") from exc
    return leaves
