"""The scheduler's live node view, by state and drain owner.

On Slurm this is an `sinfo`/`scontrol` call per read, so a read younger than
`metrics.cluster_min_interval_s` is reused: scrapes every 15 s from two Prometheus servers must
not load slurmctld. The collector time-boxes the read; a hung slurmctld reads as down.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

from pitstop.cluster.base import Scheduler
from pitstop.metrics.samples import Reading, Sample
from pitstop.policy.safety import drain_owner


class ClusterSource:
    name = "cluster"

    def __init__(self, scheduler: Callable[[], Scheduler], cluster: str, min_interval_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cluster = cluster  # the name incidents and node records carry, not the backend's
        self._make_scheduler = scheduler  # built on first read: the Slurm adapter imports paramiko
        self._scheduler: Scheduler | None = None
        self.min_interval_s = min_interval_s
        self.clock = clock
        self._lock = threading.Lock()
        self._last: tuple[float, Reading] | None = None

    def read(self) -> Reading:
        with self._lock:
            if self._last is not None and self.clock() - self._last[0] < self.min_interval_s:
                return self._last[1]
            if self._scheduler is None:
                self._scheduler = self._make_scheduler()
            nodes = self._scheduler.nodes()
            # the same "STATE+FLAG" form tasks.journal.record_node stores, so both views compare
            counts = Counter(("+".join([n.state, *n.flags]), drain_owner(n).value) for n in nodes)
            reading: Reading = [
                Sample(metric="pitstop_cluster_nodes", value=n,
                       labels={"cluster": self.cluster, "state": state, "drain_owner": owner})
                for (state, owner), n in sorted(counts.items())
            ]
            self._last = (self.clock(), reading)
            return reading
