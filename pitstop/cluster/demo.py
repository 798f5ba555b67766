"""The built-in demo cluster: a `Scheduler` and a `RemoteRunner` that need no Slurm and no GPU.

State lives in one JSON file (`$PITSTOP_HOME/demo/cluster.json`, written atomically under an
exclusive file lock) so a flow in one process and `pitstop nodes` in another see the same
cluster. Faults come from the Llama 3 interruption mix (`demo_faults.FAULTS`) with a seed, so a
demo run is reproducible. Every change a caller makes is appended to an action log: tests and
`pitstop demo` read it to prove what was (and was not) done.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pydantic import BaseModel, Field

from pitstop.cluster.base import (
    ClusterError,
    HostResult,
    HostStatus,
    JobChanges,
    JobRecord,
    NodeInfo,
    NotFound,
    RequeueResult,
    is_resubmission_of,
    refuse_env_in_place,
    requeue_with_changes,
    validate_job_changes,
    for_node,
    validate_job_id,
    validate_node_name,
)
from pitstop.cluster.demo_faults import FAULTS, FAULTS_BY_NAME, PREAMBLE, SLOWDOWNS_BY_NAME, FaultKind

DEMO_EPOCH = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)  # fixed: seeded runs are identical
# Nodes per leaf switch: a demo choice (64 leaves at 2,048 nodes); a real site's comes from its
# topology.conf (https://slurm.schedmd.com/topology.conf.html), read by `scontrol show topology`.
NODES_PER_LEAF = 32
SPINE = "spine"


class DemoNode(BaseModel):
    info: NodeInfo
    health: str = "ok"  # ok | gpu_fail | transient | down
    kernel_log: list[str] = Field(default_factory=list)
    pci: str = "0000:3b:00"
    slowdowns: dict[int, str] = Field(
        default_factory=dict, description="GPU index -> demo_faults.SLOWDOWNS name (silent, no job fails)"
    )


class DemoAction(BaseModel):
    seq: int
    op: str
    target: str
    detail: dict = Field(default_factory=dict)
    at: datetime


class DemoState(BaseModel):
    name: str = "demo"
    seed: int = 0
    next_job_id: int = 1000
    fault_count: int = 0
    nodes: dict[str, DemoNode] = Field(default_factory=dict)
    jobs: dict[str, JobRecord] = Field(default_factory=dict)
    # what Slurm keeps beside a job record: sbatch --export variables and --comment
    job_env: dict[str, dict[str, str]] = Field(default_factory=dict)
    job_comment: dict[str, str] = Field(default_factory=dict)
    actions: list[DemoAction] = Field(default_factory=list)
    # leaf switch -> its nodes, as Slurm's topology.conf has them (`SwitchName=leaf01
    # Nodes=gpu[0001-0032]`); `topology_conf()` renders it in that format
    switches: dict[str, list[str]] = Field(default_factory=dict)


class InjectedFault(BaseModel):
    job_id: str
    fault: str
    nodes: list[str]


# The last parse of each state file in this process and the file version (inode, mtime, size)
# it came from. At 2,048 nodes one parse costs ~0.1 s, a flow reads a dozen times and 16 flows
# run at once in `pitstop up`'s fast lane, each with its own DemoCluster (a burst spent about a
# third of its CPU re-parsing). Only a cache: every use checks the version under the file lock,
# a write stores what it wrote, and nothing mutates a stored parse.
_PARSES: dict[str, tuple[tuple[int, int, int], "DemoState"]] = {}


class DemoCluster:
    """Implements `Scheduler` and `RemoteRunner` over the JSON state in `root`."""

    def __init__(self, root: Path, name: str = "demo", op_delay_s: float = 0.0) -> None:
        self.root = Path(root)
        self.name = name
        self.op_delay_s = op_delay_s  # a change "takes" this long after it is applied
        self.state_path = self.root / "cluster.json"
        self.logs_dir = self.root / "jobs"
        self._parse_key = str(self.state_path.resolve())

    # ---- state file -------------------------------------------------------------------------

    @classmethod
    def create(
        cls, root: Path, nodes: int = 8, partition: str = "gpu", seed: int = 0, name: str = "demo",
        nodes_per_switch: int = NODES_PER_LEAF,
    ) -> "DemoCluster":
        """A fresh healthy cluster of `nodes` 8-GPU nodes (replaces any earlier state), cabled to
        leaf switches of `nodes_per_switch` nodes each. Names are zero-padded to the fleet's
        width, as hostlists are (gpu01..gpu08; gpu0001..gpu2048)."""
        if nodes_per_switch < 1:
            raise ClusterError(f"a leaf switch needs at least one node, not {nodes_per_switch}")
        cluster = cls(root, name)
        cluster.root.mkdir(parents=True, exist_ok=True)
        state = DemoState(name=name, seed=seed)
        width = max(2, len(str(nodes)))
        leaves = (nodes + nodes_per_switch - 1) // nodes_per_switch
        leaf_width = max(2, len(str(leaves)))
        for index in range(1, nodes + 1):
            node = f"gpu{index:0{width}d}"
            leaf = f"leaf{(index - 1) // nodes_per_switch + 1:0{leaf_width}d}"
            state.switches.setdefault(leaf, []).append(node)
            state.nodes[node] = DemoNode(
                info=NodeInfo(
                    name=node, state="IDLE", partitions=[partition], gres="gpu:h100:8", cpus=96
                ),
                pci=f"0000:{0x18 + 0x10 * (index % 8):02x}:00",
            )
        with cluster._locked() as _:
            cluster._write(state)
        return cluster

    def exists(self) -> bool:
        return self.state_path.is_file()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "cluster.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield None
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> DemoState:
        try:
            text = self.state_path.read_bytes()
        except FileNotFoundError:
            raise ClusterError(
                f"no demo cluster at {self.state_path}: run `pitstop demo` to create one"
            ) from None
        try:
            return DemoState.model_validate_json(text)
        except ValueError as exc:
            raise ClusterError(
                f"demo cluster state {self.state_path} is corrupt ({exc.__class__.__name__}); "
                "delete it and run `pitstop demo` again"
            ) from exc

    def _version(self) -> tuple[int, int, int] | None:
        try:
            st = self.state_path.stat()
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _view(self) -> DemoState:
        """The current state for reading only (callers copy what they hand out). Called under
        the lock; every write replaces the file (new inode, new mtime), which invalidates it."""
        version = self._version()
        if version is None:
            return self._read()  # raises the clear "no demo cluster" error
        cached = _PARSES.get(self._parse_key)
        if cached is not None and cached[0] == version:
            return cached[1]
        state = self._read()
        _PARSES[self._parse_key] = (version, state)
        return state

    def _write(self, state: DemoState) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(state.model_dump_json(indent=1))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.state_path)

    @contextlib.contextmanager
    def _mutate(self) -> Iterator[DemoState]:
        with self._locked():
            # a parse of its own: the shared one may be in a reader's hands outside the lock
            state = self._read()
            yield state
            self._write(state)
            version = self._version()
            if version is not None:  # what was written is what a reread would give: skip that parse
                _PARSES[self._parse_key] = (version, state)
        if self.op_delay_s:
            time.sleep(self.op_delay_s)  # applied, not yet acknowledged: where a crash hurts most

    @staticmethod
    def _log(state: DemoState, op: str, target: str, **detail) -> None:
        state.actions.append(
            DemoAction(
                seq=len(state.actions) + 1,
                op=op,
                target=target,
                detail=detail,
                at=datetime.now(timezone.utc),
            )
        )

    def topology(self) -> dict[str, list[str]]:
        """Leaf switch -> the nodes cabled to it (every node is under exactly one leaf)."""
        with self._locked():
            return {leaf: list(nodes) for leaf, nodes in self._view().switches.items()}

    def switch_of(self, node: str) -> str | None:
        return next((leaf for leaf, members in self.topology().items() if node in members), None)

    def topology_conf(self) -> str:
        """The cabling in Slurm's topology.conf format (tree plugin): one line per leaf, then the
        spine above them all."""
        from pitstop.cluster.hostlist import compress

        leaves = self.topology()
        lines = [f"SwitchName={leaf} Nodes={compress(nodes)}" for leaf, nodes in leaves.items()]
        if leaves:
            lines.append(f"SwitchName={SPINE} Switches={compress(list(leaves))}")
        return "\n".join(lines) + "\n"

    def actions(self) -> list[DemoAction]:
        """Every change made to the cluster so far, oldest first."""
        with self.frozen() as actions:
            return actions

    @contextlib.contextmanager
    def frozen(self) -> Iterator[list[DemoAction]]:
        """The changes so far, with no further change landing (from any process) until exit:
        lets a crash test see the cluster and kill a run in one step, not two racing ones."""
        with self._locked():
            yield [a.model_copy(deep=True) for a in self._view().actions]

    # ---- fault injection --------------------------------------------------------------------

    def inject_faults(self, count: int, seed: int | None = None, kinds: list[str] | None = None) -> list[InjectedFault]:
        """Run `count` jobs that each fail with a fault drawn from the mix (or from `kinds`).

        Writes each job's log file and appends the kernel lines to the node's kernel log.
        """
        with self._mutate() as state:
            rng = random.Random(state.seed * 1_000_003 + state.fault_count if seed is None else seed)
            healthy = [n for n, node in state.nodes.items() if node.health == "ok" and not node.info.is_drained]
            injected: list[InjectedFault] = []
            for index in range(count):
                fault = (
                    FAULTS_BY_NAME[kinds[index % len(kinds)]]
                    if kinds
                    else rng.choices(FAULTS, weights=[f.share for f in FAULTS])[0]
                )
                if len(healthy) < 2:
                    break
                nodes = sorted(rng.sample(healthy, 2))
                culprit = nodes[0]
                job = self._fail_job(state, fault, nodes, culprit, rng)
                injected.append(InjectedFault(job_id=job.job_id, fault=fault.name, nodes=nodes))
                if fault.node_health != "ok":
                    healthy.remove(culprit)
            state.fault_count += len(injected)
        return injected

    def fail_switch(self, switch: str, jobs: int, nodes_per_job: int = 2, seed: int = 0) -> list[InjectedFault]:
        """A leaf switch dies: `jobs` jobs running on its nodes end with the fabric fault (NCCL's
        IB completion error, the NIC's link down), each on `nodes_per_job` of its nodes."""
        fault = FAULTS_BY_NAME["network_fabric"]
        with self._mutate() as state:
            members = state.switches.get(switch)
            if not members:
                raise NotFound(f"switch {switch} is not in the demo cluster's topology")
            if not 1 <= nodes_per_job <= len(members):
                raise ClusterError(f"switch {switch} has {len(members)} nodes; a job cannot span {nodes_per_job}")
            rng = random.Random(seed)
            injected = []
            for _ in range(jobs):
                nodes = sorted(rng.sample(members, nodes_per_job))
                job = self._fail_job(state, fault, nodes, nodes[0], rng)
                injected.append(InjectedFault(job_id=job.job_id, fault=fault.name, nodes=nodes))
            state.fault_count += len(injected)
        return injected

    def _fail_job(
        self, state: DemoState, fault: FaultKind, nodes: list[str], culprit: str, rng: random.Random
    ) -> JobRecord:
        job_id = str(state.next_job_id)
        state.next_job_id += 1
        start = DEMO_EPOCH + timedelta(hours=state.fault_count + len(state.jobs))
        end = start + timedelta(minutes=rng.randint(20, 600))
        values = {
            "job": job_id,
            "node": culprit,
            "rank": rng.randint(0, 15),
            "pci": state.nodes[culprit].pci,
            "pid": rng.randint(10_000, 99_999),
            "peer": f"10.0.0.{rng.randint(2, 250)}",
        }
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.logs_dir / f"slurm-{job_id}.out"
        lines = [line.format(**values) for line in PREAMBLE + fault.log_lines]
        log_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        uptime = 86_400 + rng.randint(0, 400_000)
        node = state.nodes[culprit]
        for line in fault.kernel_lines:
            uptime += 1
            node.kernel_log.append(f"[{uptime}.{rng.randint(0, 999_999):06d}] {line.format(**values)}")
        if fault.node_health != "ok":
            node.health = fault.node_health
        if fault.node_health == "down":
            node.info.state = "DOWN"
            node.info.flags = []
            node.info.reason = "Not responding"
            node.info.reason_user = "slurm"
        job = JobRecord(
            job_id=job_id,
            name="llama-pretrain",
            user="alice",
            partition=node.info.partitions[0] if node.info.partitions else None,
            state=fault.job_state,
            exit_code=fault.exit_code,
            signal=fault.signal,
            nodes=nodes,
            submit_time=start - timedelta(minutes=2),
            start_time=start,
            end_time=end,
            time_limit_min=720,
            stdout_path=str(log_path),
            stderr_path=str(log_path),
            work_dir="/workspace",
            command="/workspace/train.sh",
        )
        state.jobs[job_id] = job
        return job

    def inject_slowdown(self, node: str, gpu: int, kind: str) -> None:
        """Make one GPU a silent straggler (`demo_faults.SLOWDOWNS`): the node's check shows it,
        no job fails."""
        if kind not in SLOWDOWNS_BY_NAME:
            raise ClusterError(f"unknown slowdown {kind!r}; choose from {', '.join(SLOWDOWNS_BY_NAME)}")
        if not 0 <= gpu < 8:
            raise ClusterError(f"demo nodes have GPUs 0-7, not {gpu}")
        with self._mutate() as state:
            self._node_for_change(state, node).slowdowns[gpu] = kind

    def clear_slowdown(self, node: str, gpu: int) -> None:
        """The GPU was fixed (reseated, cooled): it reports like its peers again."""
        with self._mutate() as state:
            self._node_for_change(state, node).slowdowns.pop(gpu, None)

    # ---- Scheduler ----------------------------------------------------------------------------

    def nodes(self, partition: str | None = None) -> list[NodeInfo]:
        with self._locked():
            state = self._view()
        return [
            _own_copy(n.info) for n in state.nodes.values()
            if partition is None or partition in n.info.partitions
        ]

    def node(self, name: str) -> NodeInfo:
        validate_node_name(name)
        with self._locked():
            state = self._view()
        if name not in state.nodes:
            raise NotFound(f"node {name} is not in the demo cluster")
        return state.nodes[name].info.model_copy(deep=True)

    def job(self, job_id: str) -> JobRecord:
        job_id = validate_job_id(job_id)
        with self._locked():
            state = self._view()
        if job_id not in state.jobs:
            raise NotFound(f"job {job_id} is not in the demo cluster")
        return state.jobs[job_id].model_copy(deep=True)

    def jobs(self, user: str | None = None) -> list[JobRecord]:
        with self._locked():
            state = self._view()
        return [j.model_copy(deep=True) for j in state.jobs.values() if user is None or j.user == user]

    def _node_for_change(self, state: DemoState, name: str) -> DemoNode:
        validate_node_name(name)
        if name not in state.nodes:
            raise NotFound(f"node {name} is not in the demo cluster")
        return state.nodes[name]

    def drain(self, node: str, reason: str) -> None:
        if not reason.strip():
            raise ClusterError(f"refusing to drain {node} without a reason")
        with self._mutate() as state:
            info = self._node_for_change(state, node).info
            if "DRAIN" not in info.flags:
                info.flags.append("DRAIN")
            info.reason, info.reason_user = reason, "pitstop"
            info.reason_time = datetime.now(timezone.utc)
            self._log(state, "drain", node, reason=reason)

    def resume(self, node: str) -> None:
        with self._mutate() as state:
            demo_node = self._node_for_change(state, node)
            if demo_node.health == "down":
                raise ClusterError(f"cannot resume {node}: it is not responding")
            demo_node.info.flags = [f for f in demo_node.info.flags if not f.startswith("DRAIN")]
            demo_node.info.state = "IDLE"
            demo_node.info.reason = demo_node.info.reason_user = demo_node.info.reason_time = None
            self._log(state, "resume", node)

    def reboot(self, node: str, reason: str) -> None:
        with self._mutate() as state:
            demo_node = self._node_for_change(state, node)
            # A reboot clears what the fault table calls transient; a dead GPU stays dead.
            if demo_node.health in {"transient", "down"}:
                demo_node.health = "ok"
            demo_node.info.state = "IDLE"
            demo_node.kernel_log.append("[5.000001] Linux version 6.1.0-demo (rebooted by pitstop)")
            self._log(state, "reboot", node, reason=reason)

    def requeue(self, job_id: str, hold: bool = False) -> None:
        job_id = validate_job_id(job_id)
        with self._mutate() as state:
            job = self._job_for_change(state, job_id)
            if job.state == "PENDING":  # as Slurm: only a running or ended job can be requeued
                raise ClusterError(f"cannot requeue job {job_id}: Job is pending execution")
            job.state = "PENDING"
            job.restart_count += 1
            job.reason = "job_requeued_in_held_state" if hold else "BeginTime"
            self._log(state, "requeue", job_id, hold=hold)

    def hold(self, job_id: str) -> None:
        job_id = validate_job_id(job_id)
        with self._mutate() as state:
            job = self._job_for_change(state, job_id)
            if job.state != "PENDING":
                raise ClusterError(f"cannot hold job {job_id}: Job is no longer pending execution")
            job.reason = "JobHeldAdmin"
            self._log(state, "hold", job_id)

    def release(self, job_id: str) -> None:
        job_id = validate_job_id(job_id)
        with self._mutate() as state:
            job = self._job_for_change(state, job_id)
            if job.is_held:
                job.reason = None
            self._log(state, "release", job_id)

    def _job_for_change(self, state: DemoState, job_id: str) -> JobRecord:
        if job_id not in state.jobs:
            raise NotFound(f"job {job_id} is not in the demo cluster")
        return state.jobs[job_id]

    def update_job(self, job_id: str, changes: JobChanges) -> None:
        job_id = validate_job_id(job_id)
        refuse_env_in_place(job_id, validate_job_changes(changes))
        with self._mutate() as state:
            job = self._job_for_change(state, job_id)
            unknown = [n for n in changes.exclude_nodes if n not in state.nodes]
            if unknown:  # Slurm's words for an ExcNodeList naming a node it does not have
                raise NotFound(
                    f"cannot update job {job_id}: Invalid node name specified ({','.join(unknown)})"
                )
            job.excluded_nodes = sorted(set(job.excluded_nodes) | set(changes.exclude_nodes))
            if changes.time_limit_min:
                job.time_limit_min = changes.time_limit_min
            self._log(state, "update_job", job_id, **changes.model_dump(exclude_defaults=True))

    def resubmit(self, job_id: str, changes: JobChanges, comment: str | None = None) -> str:
        job_id = validate_job_id(job_id)
        validate_job_changes(changes)
        with self._mutate() as state:
            old = self._job_for_change(state, job_id)
            new_id = str(state.next_job_id)
            state.next_job_id += 1
            state.jobs[new_id] = old.model_copy(
                update={
                    "job_id": new_id,
                    "state": "PENDING",
                    "exit_code": None,
                    "signal": None,
                    "nodes": [],
                    "start_time": None,
                    "end_time": None,
                    "excluded_nodes": sorted(set(old.excluded_nodes) | set(changes.exclude_nodes)),
                    "time_limit_min": changes.time_limit_min or old.time_limit_min,
                    "restart_count": 0,
                    "reason": None,
                }
            )
            # as sbatch --export=ALL,K=V: the submitter's environment plus these, nothing of the
            # old job's own additions (a resubmission of a resubmission gets only its own)
            state.job_env[new_id] = dict(changes.env)
            old_comment = state.job_comment.get(job_id)
            full_comment = " | ".join(c for c in (comment, old_comment) if c)
            if full_comment:
                state.job_comment[new_id] = full_comment
            self._log(state, "resubmit", job_id, new_job_id=new_id, comment=full_comment,
                      **changes.model_dump(exclude_defaults=True))
        return new_id

    def requeue_with_changes(
        self, job_id: str, changes: JobChanges, *, incident_id: int | None = None,
        resume_held: bool = False,
    ) -> RequeueResult:
        """The same contract as Slurm's, from the same code: see `base.requeue_with_changes`."""
        return requeue_with_changes(
            self, job_id, changes, incident_id=incident_id, resume_held=resume_held
        )

    def find_resubmission(self, job_id: str, incident_id: int | None = None) -> str | None:
        job_id = validate_job_id(job_id)
        with self._locked():
            comments = dict(self._view().job_comment)
        found = [j for j, c in comments.items() if is_resubmission_of(c, job_id, incident_id)]
        return min(found, key=int) if found else None

    def job_environment(self, job_id: str) -> dict[str, str]:
        """The variables a (resubmitted) job was given on top of its submitter's environment."""
        job_id = validate_job_id(job_id)
        with self._locked():
            return dict(self._view().job_env.get(job_id, {}))

    # ---- RemoteRunner -----------------------------------------------------------------------

    def run(self, host: str, argv: list[str], timeout_s: float | None = None) -> HostResult:
        return self._run_on(self._snapshot(), host, argv, timeout_s)

    def _snapshot(self) -> DemoState | None:
        try:
            with self._locked():
                return self._view()
        except ClusterError:
            return None  # _run_on says why, per host, as a failed host never raises

    def _run_on(self, state: DemoState | None, host: str, argv: list[str], timeout_s: float | None) -> HostResult:
        started = time.monotonic()
        try:
            validate_node_name(host)
            argv = for_node(argv, host)
            if state is None:
                with self._locked():
                    state = self._read()  # raises the clear "no demo cluster" / "corrupt" error
            node = state.nodes.get(host)
            if node is None:
                return HostResult(host=host, status=HostStatus.ERROR, error=f"unknown host {host}")
            if node.health == "down":
                return HostResult(
                    host=host,
                    status=HostStatus.TIMEOUT,
                    error=f"{host}: connection timed out (node is not responding)",
                    duration_s=timeout_s or 10.0,
                )
            code, out, err = _demo_command(node.model_copy(), argv)  # a copy: the view is shared
            status = HostStatus.OK if code == 0 or argv[:2] == ["pitstop", "node-check"] else HostStatus.ERROR
            return HostResult(
                host=host,
                status=status,
                exit_code=code,
                stdout=out,
                stderr=err,
                error=None if status is HostStatus.OK else err.strip() or f"exit {code}",
                duration_s=time.monotonic() - started,
            )
        except Exception as exc:  # a failed host never raises out of the runner
            return HostResult(host=host, status=HostStatus.ERROR, error=f"{host}: {exc}")

    def fan_out(
        self, hosts: list[str], argv: list[str], timeout_s: float | None = None
    ) -> list[HostResult]:
        # One read of the state for the whole fan-out: a read per host re-parses the whole fleet
        # each time (93 ms per host at 2,048 nodes, a 3-minute sweep), as no real node does.
        state = self._snapshot() if hosts else None
        return [self._run_on(state, host, argv, timeout_s) for host in hosts]


def _own_copy(info: NodeInfo) -> NodeInfo:
    """A NodeInfo the caller may change without changing the shared view (its lists are its
    own); 10x cheaper than a deep copy, which at 2,048 nodes costs more than a parse."""
    return info.model_copy(update={"flags": list(info.flags), "partitions": list(info.partitions)})


def _demo_command(node: DemoNode, argv: list[str]) -> tuple[int, str, str]:
    """What the few commands Pitstop runs on a node print on this demo node."""
    program = Path(argv[0]).name if argv else ""
    if program in {"dmesg", "journalctl"}:
        return 0, "".join(line + "\n" for line in node.kernel_log), ""
    if program == "pitstop" and argv[1:2] == ["node-check"]:
        report = _node_check_report(node)
        return {"OK": 0, "WARN": 1, "FAIL": 2}[report["overall"]], json.dumps(report), ""
    if program == "dcgmi" and argv[1:2] == ["diag"]:
        ok = node.health == "ok"
        verdict = "Pass" if ok else "Fail"
        text = (
            "+---------------------------+------------------------------------------------+\n"
            "| Diagnostic                | Result                                         |\n"
            "+===========================+================================================+\n"
            f"| Memory                    | {verdict:<46} |\n"
            f"| Diagnostic                | {verdict:<46} |\n"
            "+---------------------------+------------------------------------------------+\n"
        )
        return (0 if ok else 226), text, ""
    if program == "nvidia-smi" and "--gpu-reset" in argv:
        if node.health == "gpu_fail":
            return 1, "", f"Unable to reset GPU {node.pci}: GPU is lost (fallen off the bus)"
        if node.health == "transient":
            node.health = "ok"  # not persisted: the runner reads a copy; a reset is advisory here
        return 0, f"GPU {node.pci} was successfully reset.", ""
    if program == "true":
        return 0, "", ""
    return 127, "", f"{program or '(empty)'}: command not found on demo node {node.info.name}"


def _node_check_report(node: DemoNode) -> dict:
    from pitstop.cluster.demo_faults import DEMO_CUDA, DEMO_DRIVER, demo_gpu_fields, demo_pcie_links
    from pitstop.config import NodeCheckSettings
    from pitstop.models import CheckResult, CheckStatus, NodeCheckReport
    from pitstop.node import nvml, pcie

    # The GPUs' telemetry goes through the real nvml and pcie verdicts, as on a real node.
    snap = nvml.NvmlSnapshot(driver_version=DEMO_DRIVER, cuda_driver_version=DEMO_CUDA, gpus=[
        nvml.GpuHealth.model_validate(demo_gpu_fields(node.info.name, i, node.slowdowns.get(i))) for i in range(8)])
    telemetry = nvml.evaluate(snap, NodeCheckSettings())
    links = [pcie.PcieLink.model_validate(link) for link in demo_pcie_links(node.slowdowns)]

    gpu_status = {
        "ok": CheckStatus.OK,
        "transient": CheckStatus.FAIL,
        "gpu_fail": CheckStatus.FAIL,
    }.get(node.health, CheckStatus.FAIL)
    xids = [line for line in node.kernel_log if "NVRM: Xid" in line]
    checks = [
        CheckResult(
            name="nvml",
            status=telemetry.status if gpu_status is CheckStatus.OK else gpu_status,
            summary=telemetry.summary if gpu_status is CheckStatus.OK else f"GPU at PCI:{node.pci} unhealthy",
            details=telemetry.details,
        ),
        CheckResult(
            name="xid",
            status=CheckStatus.FAIL if xids and node.health != "ok" else CheckStatus.OK,
            summary=f"{len(xids)} Xid line(s) in the kernel log" if xids else "no Xid lines",
            details={"lines": xids[-10:]},
        ),
        CheckResult(name="ib", status=CheckStatus.OK, summary="2 ports Active at 400 Gb/sec"),
        pcie.evaluate(links, NodeCheckSettings()),
    ]
    overall = next((s for s in (CheckStatus.FAIL, CheckStatus.WARN) if any(c.status is s for c in checks)),
                   CheckStatus.OK)
    return NodeCheckReport(
        node=node.info.name,
        checked_at=datetime.now(timezone.utc).isoformat(),
        overall=overall,
        checks=checks,
    ).model_dump(mode="json")
