"""The Slurm adapter: the `Scheduler` interface over sinfo, squeue, scontrol, sacct and sbatch.

Every call is a subprocess with an argv list (never a shell), a timeout, and SLURM_CONF from
settings when given. Identifiers are validated before they reach an argv; free text (a drain
reason) travels as one argv item. Parsing lives in `slurm_parse` (pure); this module only runs
the tools and maps their failures to ClusterError / NotFound with the tool's own words.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from pitstop.cluster.base import (
    ClusterError,
    JobChanges,
    JobRecord,
    NodeInfo,
    NotFound,
    RequeueResult,
    is_resubmission_of,
    refuse_env_in_place,
    requeue_with_changes,
    validate_job_changes,
    validate_job_id,
    validate_node_name,
)
from pitstop.cluster.hostlist import compress, expand
from pitstop.cluster.slurm_parse import (
    SACCT_FIELDS,
    SlurmParseError,
    parse_sacct,
    parse_scontrol_jobs,
    parse_scontrol_nodes,
    parse_scontrol_records,
    parse_scontrol_topology,
    parse_sinfo_json,
    parse_squeue_json,
)
from pitstop.config import SlurmSettings

# What Slurm's tools say when the thing asked about does not exist.
_NOT_FOUND = re.compile(
    r"Invalid job id specified|Invalid node name specified|not found|Job has already finished"
    r"|Unable to find job|Invalid job id"
)
_UNSUPPORTED_OPTION = re.compile(r"unrecognized option|invalid option|unknown option")
MAX_REASON_CHARS = 512


def check_reason(reason: str) -> str:
    """A drain/reboot reason: one line of printable text (Slurm stores and shows it verbatim)."""
    if not isinstance(reason, str) or not reason.strip():
        raise ClusterError("a drain/reboot reason is required (operators read it in sinfo -R)")
    if len(reason) > MAX_REASON_CHARS or any(c in reason for c in "\r\n\x00"):
        raise ClusterError(
            f"reason must be one line of at most {MAX_REASON_CHARS} characters: {reason[:80]!r}"
        )
    return reason.strip()


class SlurmScheduler:
    """`Scheduler` for a real Slurm cluster, talking to it through its command-line tools."""

    name = "slurm"

    def __init__(self, settings: SlurmSettings | None = None, env: Mapping[str, str] | None = None):
        self.settings = settings or SlurmSettings()
        base_env = dict(os.environ if env is None else env)
        if self.settings.conf_path is not None:
            base_env["SLURM_CONF"] = str(self.settings.conf_path)
        self._env = base_env

    # ------------------------------------------------------------------------------ reading

    def nodes(self, partition: str | None = None) -> list[NodeInfo]:
        try:
            nodes = parse_sinfo_json(self._run("sinfo", ["--json"]))
        except ClusterError as exc:
            if not _UNSUPPORTED_OPTION.search(str(exc)):
                raise
            nodes = parse_scontrol_nodes(self._run("scontrol", ["-o", "show", "node"]))
        if partition is not None:
            nodes = [n for n in nodes if partition in n.partitions]
        return nodes

    def node(self, name: str) -> NodeInfo:
        name = validate_node_name(name)
        out = self._run("scontrol", ["-o", "show", "node", name])
        for node in parse_scontrol_nodes(out):
            if node.name == name:
                return node
        raise NotFound(f"Slurm does not know node {name!r}")

    def job(self, job_id: str) -> JobRecord:
        """One job's full record: slurmctld's while it remembers the job, else accounting's."""
        job_id = validate_job_id(job_id)
        try:
            record = self._live_job(job_id)
        except NotFound:
            return self.accounting(job_id)
        if record.submit_line is None:
            try:  # 22.05's scontrol does not print SubmitLine; slurmdbd keeps it
                record.submit_line = self.accounting(job_id).submit_line
            except ClusterError:
                pass  # no accounting here: the record is still complete without it
        return record

    def jobs(self, user: str | None = None) -> list[JobRecord]:
        # squeue --json ignores --user/-j filters on 22.05, so filter here
        jobs = parse_squeue_json(self._run("squeue", ["--json"]))
        return [j for j in jobs if user is None or j.user == user]

    def topology(self) -> dict[str, list[str]]:
        """Leaf switch -> its nodes, from the topology/tree plugin; {} where none is configured."""
        return parse_scontrol_topology(self._run("scontrol", ["show", "topology"]))

    def batch_script(self, job_id: str) -> str:
        """The job's batch script as slurmctld stored it (while the job is still known)."""
        job_id = validate_job_id(job_id)
        try:
            return self._run("scontrol", ["write", "batch_script", job_id, "-"])
        except NotFound as exc:
            raise NotFound(
                f"slurmctld no longer holds the batch script of job {job_id} "
                f"(finished jobs are forgotten after MinJobAge): {exc}"
            ) from exc

    # ------------------------------------------------------------------------------ actions

    def drain(self, node: str, reason: str) -> None:
        node = validate_node_name(node)
        self._run(
            "scontrol", ["update", f"NodeName={node}", "State=DRAIN", f"Reason={check_reason(reason)}"]
        )

    def resume(self, node: str) -> None:
        node = validate_node_name(node)
        try:
            self._run("scontrol", ["update", f"NodeName={node}", "State=RESUME"])
        except ClusterError as exc:
            # Slurm refuses RESUME on a node that is not drained or down; that is already done
            if "Invalid node state" not in str(exc):
                raise
            current = self.node(node)
            if current.is_drained or current.is_down:
                raise
        return None

    def reboot(self, node: str, reason: str) -> None:
        """Reboot the node once its jobs end. A node already drained stays drained afterwards
        (plain `scontrol reboot`): Pitstop's own resume, after the check passes, returns it.
        scontrol(1): the DRAIN flag is cleared after the reboot if it was ASAP or had a
        nextstate, so those forms would put a node Pitstop wants kept out back into service.
        A node not drained gets ASAP, so that no new job starts on it before the reboot."""
        node = validate_node_name(node)
        asap = [] if self.node(node).is_drained else ["ASAP"]
        self._run("scontrol", ["reboot", *asap, f"reason={check_reason(reason)}", node])

    def requeue(self, job_id: str, hold: bool = False) -> None:
        job_id = validate_job_id(job_id)
        self._run("scontrol", ["requeuehold" if hold else "requeue", job_id])

    def hold(self, job_id: str) -> None:
        self._run("scontrol", ["hold", validate_job_id(job_id)])

    def release(self, job_id: str) -> None:
        self._run("scontrol", ["release", validate_job_id(job_id)])

    def update_job(self, job_id: str, changes: JobChanges) -> None:
        """Change a pending job in place. Environment changes need a resubmission instead."""
        job_id = validate_job_id(job_id)
        refuse_env_in_place(job_id, validate_job_changes(changes))
        args = [f"JobId={job_id}"]
        if changes.exclude_nodes:
            current = self.job(job_id)
            excluded = _merge_nodes(current.excluded_nodes, changes.exclude_nodes)
            args.append(f"ExcNodeList={compress(excluded)}")
        if changes.time_limit_min is not None:
            args.append(f"TimeLimit={changes.time_limit_min}")
        if len(args) == 1:
            return None
        self._run("scontrol", ["update", *args])

    def resubmit(self, job_id: str, changes: JobChanges, comment: str | None = None) -> str:
        """Submit the job's own batch script again with `changes` applied; returns the new id.
        `comment` (a Pitstop tag) goes before the old job's own comment."""
        job_id = validate_job_id(job_id)
        validate_job_changes(changes)
        records = parse_scontrol_records(self._run("scontrol", ["-o", "show", "job", job_id]))
        if not records:
            raise NotFound(f"Slurm does not know job {job_id}")
        script = self.batch_script(job_id)
        comment = " | ".join(c for c in (comment, self._comments(job_id).get(job_id)) if c)
        argv = build_resubmit_argv(
            records[0], changes, job_id, as_root=os.geteuid() == 0, comment=comment or None
        )
        out = self._run("sbatch", argv, input_text=script).strip()
        new_id = out.split(";", 1)[0]
        try:
            return validate_job_id(new_id)
        except ValueError as exc:
            raise ClusterError(f"sbatch did not print a job id (it printed {out[:200]!r})") from exc

    def requeue_with_changes(
        self, job_id: str, changes: JobChanges, *, incident_id: int | None = None,
        resume_held: bool = False,
    ) -> RequeueResult:
        """requeuehold -> scontrol update -> release (never runnable before the change), or a
        tagged resubmission for env changes: see `base.requeue_with_changes`."""
        return requeue_with_changes(
            self, job_id, changes, incident_id=incident_id, resume_held=resume_held
        )

    def find_resubmission(self, job_id: str, incident_id: int | None = None) -> str | None:
        """Looks in slurmctld's memory (pending, running, and ended within MinJobAge)."""
        job_id = validate_job_id(job_id)
        found = [j for j, c in self._comments().items() if is_resubmission_of(c, job_id, incident_id)]
        return min(found, key=_job_sort_key) if found else None

    def _comments(self, job_id: str | None = None) -> dict[str, str]:
        """Job id -> comment. Not from `scontrol -o`: a comment's own spaces and '=' would read
        as further keys there."""
        args = ["--noheader", "--states=all", "--format=%i|%k"]
        out = self._run("squeue", [*args, f"--jobs={job_id}"] if job_id else args)
        comments = {}
        for line in out.splitlines():
            jid, sep, comment = line.partition("|")
            if sep and comment.strip() not in {"", "(null)"}:
                comments[jid.strip()] = comment.strip()
        return comments

    # ------------------------------------------------------------------------------ plumbing

    def _live_job(self, job_id: str) -> JobRecord:
        records = parse_scontrol_jobs(self._run("scontrol", ["-o", "show", "job", job_id]))
        for record in records:
            if record.job_id == job_id:
                return record
        if records:  # `show job 123` of an array lists its tasks; the first is the job's face
            return records[0]
        raise NotFound(f"Slurm does not know job {job_id}")

    def accounting(self, job_id: str) -> JobRecord:
        """The job as slurmdbd recorded it (`sacct -P`; its --json is wrong about exit codes on 22.05)."""
        job_id = validate_job_id(job_id)
        out = self._run(
            "sacct",
            ["-P", "--noheader", "-X", "-j", job_id, f"--format={','.join(SACCT_FIELDS)}"],
        )
        rows = parse_sacct(out)
        if not rows:
            raise NotFound(f"neither slurmctld nor accounting (sacct) knows job {job_id}")
        return rows[-1]  # a requeued job's latest run

    def _tool(self, tool: str) -> str:
        bin_dir = self.settings.bin_dir
        return str(Path(bin_dir) / tool) if bin_dir else tool

    def _run(self, tool: str, args: Sequence[str], input_text: str | None = None) -> str:
        argv = [self._tool(tool), *args]
        shown = " ".join(argv)
        timeout = self.settings.command_timeout_s
        try:
            proc = subprocess.run(
                argv,
                input=input_text.encode() if input_text is not None else None,
                capture_output=True,
                env=self._env,
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL if input_text is None else None,
            )
        except FileNotFoundError as exc:
            raise ClusterError(
                f"{tool} not found ({'bin_dir ' + str(self.settings.bin_dir) if self.settings.bin_dir else 'PATH'}); "
                "is slurm-client installed on this host, or is slurm.bin_dir wrong?"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise ClusterError(
                f"`{shown}` did not answer within {timeout:g} s; is slurmctld up? (try `scontrol ping`)"
            ) from exc
        except OSError as exc:
            raise ClusterError(f"cannot run `{shown}`: {exc}") from exc
        stdout = proc.stdout.decode("utf-8", errors="replace")
        stderr = proc.stderr.decode("utf-8", errors="replace").strip()
        if proc.returncode != 0:
            said = (stderr or stdout.strip() or "no output")[:800]
            error = NotFound if _NOT_FOUND.search(said) else ClusterError
            raise error(f"`{shown}` failed (exit {proc.returncode}): {said}")
        return stdout


def _job_sort_key(job_id: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.split(r"[_+]", job_id) if p.isdigit())


def _merge_nodes(old: Sequence[str], new: Sequence[str]) -> list[str]:
    return list(dict.fromkeys([*old, *(validate_node_name(n) for n in new)]))


def build_resubmit_argv(
    record: Mapping[str, str],
    changes: JobChanges,
    old_job_id: str,
    as_root: bool = False,
    comment: str | None = None,
) -> list[str]:
    """sbatch options that rebuild a job from its `scontrol -o show job` record, plus changes.

    The script's own #SBATCH lines still apply; options here (from the record) win over them,
    which keeps command-line options of the original submission.
    """

    def known(key: str) -> str | None:
        value = (record.get(key) or "").strip()
        return None if value in {"", "(null)", "N/A", "None"} else value

    validate_job_changes(changes)
    argv = ["--parsable"]
    if known("JobName"):
        argv.append(f"--job-name={record['JobName']}")
    if known("Partition"):
        argv.append(f"--partition={record['Partition']}")
    if known("WorkDir"):
        argv.append(f"--chdir={record['WorkDir']}")
    if known("Account"):
        argv.append(f"--account={record['Account']}")
    nodes = known("NumNodes")
    if nodes and re.fullmatch(r"\d+(-\d+)?", nodes):
        argv.append(f"--nodes={nodes}")
    tasks = known("NumTasks")
    if tasks and tasks.isdigit():
        argv.append(f"--ntasks={tasks}")
    cpt = known("CPUs/Task")
    if cpt and cpt.isdigit():
        argv.append(f"--cpus-per-task={cpt}")
    tres = known("TresPerNode")  # e.g. gres:gpu:2 (22.05) or gres/gpu:2 (23.x)
    if tres:
        argv.append("--gres=" + re.sub(r"^gres[:/]|(?<=,)gres[:/]", "", tres))
    # Output paths: scontrol shows them expanded (f-123.out). Re-using that would overwrite the
    # old job's log, so put %j back where the old id was.
    # A fixed name (train.log) is appended to rather than truncated, for the same reason.
    append = False
    for key, option in (("StdOut", "--output"), ("StdErr", "--error")):
        path = known(key)
        if path:
            pattern = _reparameterise(path, old_job_id)
            append = append or "%j" not in pattern
            argv.append(f"{option}={pattern}")
    if append:
        argv.append("--open-mode=append")
    time_limit = changes.time_limit_min
    if time_limit is None and known("TimeLimit") and record["TimeLimit"] != "UNLIMITED":
        argv.append(f"--time={record['TimeLimit']}")
    elif time_limit is not None:
        argv.append(f"--time={time_limit}")
    merged = _merge_nodes(_expand_quiet(known("ExcNodeList") or ""), changes.exclude_nodes)
    if merged:
        argv.append(f"--exclude={compress(merged)}")
    if changes.env:  # validated above: no value holds what sbatch would split or unquote
        argv.append("--export=ALL," + ",".join(f"{k}={v}" for k, v in changes.env.items()))
    if comment:
        argv.append(f"--comment={comment}")
    user = known("UserId")
    if as_root and user:
        # root resubmits on the user's behalf: the job must run as its owner, never as root
        name = user.split("(", 1)[0]
        group = (known("GroupId") or "").split("(", 1)[0]
        if name != "root":
            argv.append(f"--uid={name}")
            if group:
                argv.append(f"--gid={group}")
    return argv


def _expand_quiet(expression: str) -> list[str]:
    if not expression:
        return []
    try:
        return expand(expression)
    except ValueError as exc:
        raise SlurmParseError(f"bad ExcNodeList from scontrol: {exc}") from exc


def _reparameterise(path: str, old_job_id: str) -> str:
    head, sep, tail = path.rpartition(old_job_id)
    return f"{head}%j{tail}" if sep else path
