"""The node pool: which nodes are out (and since when), which are secretly bad, and the job's
allocation. Only nodes that are out or bad are tracked; every other node is a healthy name.
"""

from __future__ import annotations

import math
import random

from pitstop.cluster.base import NodeInfo
from pitstop.policy.safety import Owner
from pitstop.simulate.params import STRENGTH, Need

PARTITION = "gpu"
SLURM_DOWN_REASON = "Not responding"  # what slurmctld writes on a node it lost: not Pitstop's


class Pool:
    def __init__(self, size: int, job_nodes: int, rng: random.Random) -> None:
        self.names = [f"gpu{i:04d}" for i in range(size)]
        self.job_size = job_nodes
        self.rng = rng
        self.out: dict[str, tuple[float, str, Owner]] = {}  # node -> (since, why, whose reason)
        self.reason: dict[str, str] = {}  # node -> drain reason (for NodeInfo)
        self.outages: list[tuple[float, float]] = []  # closed (start, end) intervals
        self.bad: dict[str, tuple[Need, str]] = {}  # node -> (hidden need, category)
        self.token: dict[str, int] = {}  # node -> generation; a stale "back" event is ignored
        self.allocation: list[str] = self.names[:job_nodes]
        self.in_job: set[str] = set(self.allocation)

    # --- hidden health ------------------------------------------------------------------------
    def break_node(self, node: str, need: Need, category: str) -> None:
        if need is Need.NONE:
            return
        current = self.bad.get(node)
        if current is None or STRENGTH[need] >= STRENGTH[current[0]]:
            self.bad[node] = (need, category)

    def need(self, node: str) -> Need:
        return self.bad.get(node, (Need.NONE, ""))[0]

    def fix(self, node: str, strength: int) -> None:
        """A reset (1), a reboot (2) or a repair (3) clears every need up to its strength."""
        if node in self.bad and STRENGTH[self.bad[node][0]] <= strength:
            del self.bad[node]

    # --- in and out of service ----------------------------------------------------------------
    def take_out(self, node: str, t: float, why: str, owner: Owner = Owner.PITSTOP, reason: str = "") -> int:
        if node not in self.out:
            self.out[node] = (t, why, owner)
        else:
            since, _, _ = self.out[node]
            self.out[node] = (since, why, owner)
        self.reason[node] = reason
        self.token[node] = self.token.get(node, 0) + 1
        return self.token[node]

    def bring_back(self, node: str, t: float) -> None:
        entry = self.out.pop(node, None)
        self.reason.pop(node, None)
        self.token[node] = self.token.get(node, 0) + 1
        if entry is not None:
            self.outages.append((entry[0], t))

    def info(self, node: str) -> NodeInfo:
        """The scheduler's view of the node, as the decision's ownership guard reads it."""
        entry = self.out.get(node)
        if entry is None:
            state = "ALLOCATED" if node in self.in_job else "IDLE"
            return NodeInfo(name=node, state=state, partitions=[PARTITION])
        _, _, owner = entry
        if owner is Owner.FOREIGN:
            return NodeInfo(name=node, state="DOWN", reason=SLURM_DOWN_REASON, partitions=[PARTITION])
        return NodeInfo(name=node, state="IDLE", flags=["DRAIN"], reason=self.reason.get(node) or None,
                        partitions=[PARTITION])

    @property
    def healthy(self) -> int:
        return len(self.names) - len(self.out)

    # --- the job's allocation -----------------------------------------------------------------
    def available(self, excluded: set[str]) -> int:
        return len(self.names) - len(self.out) - sum(1 for n in excluded if n not in self.out)

    def allocate(self, excluded: set[str]) -> bool:
        """Give the job its nodes: those it had that are still usable, topped up at random from
        the rest. False when the pool cannot cover the job (it waits)."""
        if self.available(excluded) < self.job_size:
            return False
        keep = [n for n in self.allocation if n not in self.out and n not in excluded]
        missing = self.job_size - len(keep)
        if missing:
            kept = set(keep)
            free = [n for n in self.names if n not in self.out and n not in excluded and n not in kept]
            keep += self.rng.sample(free, missing)
        self.allocation = keep
        self.in_job = set(keep)
        return True

    def bad_in_job(self) -> list[str]:
        return [n for n in self.bad if n in self.in_job and n not in self.out]

    # --- nodes out of the pool over time ------------------------------------------------------
    def hourly_out(self, horizon: float) -> list[int]:
        hours = int(math.ceil(horizon / 60.0))
        diff = [0] * (hours + 2)
        spans = self.outages + [(since, horizon + 60.0) for since, _, _ in self.out.values()]  # still out at the end
        for start, end in spans:
            a, b = int(math.ceil(start / 60.0)), min(int(math.ceil(end / 60.0)), hours + 1)
            if a < b:
                diff[a] += 1
                diff[b] -= 1
        series, level = [], 0
        for h in range(hours + 1):
            level += diff[h]
            series.append(level)
        return series
