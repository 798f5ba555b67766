"""Spool depth: event files per spool directory, and how long the oldest has waited."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from pitstop.events.spool import Spool, spools_to_deliver
from pitstop.metrics.samples import Reading, Sample

STAMP_FORMAT = "%Y%m%dT%H%M%S%f"  # Spool.file_name: <occurred>-<id>.json


def occurred_at(path: Path) -> float:
    """When the event in a spool file happened, from its name; its mtime for a stray name."""
    try:
        stamp = datetime.strptime(path.name.split("-", 1)[0], STAMP_FORMAT).replace(tzinfo=timezone.utc)
        return stamp.timestamp()
    except ValueError:
        return path.stat().st_mtime


class SpoolSource:
    name = "spool"

    def __init__(self, spool_dir: Path, spools: Callable[[Path], list[Spool]] = spools_to_deliver,
                 clock: Callable[[], float] = time.time) -> None:
        self.spool_dir = spool_dir
        self.spools = spools
        self.clock = clock

    def read(self) -> Reading:
        out: Reading = []
        for spool in self.spools(self.spool_dir):
            where = str(spool.root)
            for state, n in spool.counts().items():
                out.append(Sample(metric="pitstop_spool_events", value=n, labels={"spool": where, "state": state}))
            age = 0.0
            for path in spool.pending_paths()[:1]:  # sorted by name: the oldest first
                try:
                    age = max(0.0, self.clock() - occurred_at(path))
                except FileNotFoundError:
                    pass  # delivered between the listing and now
            out.append(Sample(metric="pitstop_spool_oldest_pending_age_seconds", value=age, labels={"spool": where}))
        return out
