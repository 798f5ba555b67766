"""What every remediation task needs, built once per flow run and passed down (no globals)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from pitstop.cluster.base import RemoteRunner, Scheduler
from pitstop.cluster.factory import make_runner, make_scheduler
from pitstop.config import Settings, load_settings
from pitstop.store import Store


@dataclass
class PipelineContext:
    settings: Settings
    store: Store
    scheduler: Scheduler
    runner: RemoteRunner
    cluster_name: str
    flow_run_id: str | None = None
    flow_run_url: str | None = None
    started_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    @property
    def dry_run(self) -> bool:
        return self.settings.dry_run

    def close(self) -> None:
        """Release pooled SSH connections and the DB engine (a served flow runs many times)."""
        closer = getattr(self.runner, "close", None)
        if callable(closer):
            closer()
        self.store.dispose()

    def incident_dir(self, incident_id: int | str) -> Path:
        path = self.settings.home / "incidents" / str(incident_id)
        path.mkdir(parents=True, exist_ok=True)
        return path


def cluster_name_for(settings: Settings) -> str:
    return "demo" if settings.cluster == "demo" else settings.slurm.cluster_name


def build_context(settings: Settings | None = None, cluster: str | None = None) -> PipelineContext:
    """Settings from the environment/TOML, the store, and the configured cluster backend."""
    settings = settings or load_settings()
    from tasks.runinfo import current_flow_run

    run_id, run_url = current_flow_run()
    return PipelineContext(
        settings=settings,
        store=Store.from_settings(settings),
        scheduler=make_scheduler(settings),
        runner=make_runner(settings),
        cluster_name=cluster or cluster_name_for(settings),
        flow_run_id=run_id,
        flow_run_url=run_url,
    )
