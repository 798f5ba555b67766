"""Builds the scheduler and remote runner that settings name (`Settings.cluster`).

The one place that knows which backends exist; flows call these and never import a backend.
Backends are imported lazily: the Slurm/SSH adapters pull in paramiko.
"""

from __future__ import annotations

from pathlib import Path

from pitstop.cluster.base import ClusterError, RemoteRunner, Scheduler
from pitstop.config import Settings

BACKENDS = ("demo", "slurm")


def demo_root(settings: Settings) -> Path:
    return settings.pipeline.demo_dir or settings.home / "demo"


def make_demo_cluster(settings: Settings):
    from pitstop.cluster.demo import DemoCluster

    delay = settings.pipeline.demo_op_delay_s
    cluster = DemoCluster(demo_root(settings), op_delay_s=delay)
    if not cluster.exists():
        DemoCluster.create(demo_root(settings), nodes=settings.pipeline.demo_nodes, seed=settings.pipeline.demo_seed)
    return cluster


def make_scheduler(settings: Settings) -> Scheduler:
    if settings.cluster == "demo":
        return make_demo_cluster(settings)
    if settings.cluster == "slurm":
        from pitstop.cluster.slurm import SlurmScheduler

        return SlurmScheduler(settings.slurm)
    raise ClusterError(
        f"unknown cluster backend {settings.cluster!r}: set PITSTOP_CLUSTER to one of {', '.join(BACKENDS)}"
    )


def make_runner(settings: Settings) -> RemoteRunner:
    if settings.cluster == "demo":
        return make_demo_cluster(settings)
    if settings.cluster == "slurm":
        from pitstop.cluster.ssh import SshRunner

        return SshRunner(settings.ssh)
    raise ClusterError(
        f"unknown cluster backend {settings.cluster!r}: set PITSTOP_CLUSTER to one of {', '.join(BACKENDS)}"
    )
