"""Wiring: the collector and its sources from settings, the /metrics HTTP server, one-shot text.

`pitstop up` runs `MetricsServer`; `pitstop metrics` prints `render`'s text once (for a
node_exporter textfile collector). Both build the same collector, so they export the same thing.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest

from pitstop.config import Settings
from pitstop.metrics.cluster_source import ClusterSource
from pitstop.metrics.collector import PitstopCollector
from pitstop.metrics.prefect_source import PrefectSweepSource
from pitstop.metrics.spool_source import SpoolSource
from pitstop.metrics.store_source import StoreSource
from pitstop.metrics.timebox import SourceResult
from pitstop.store.db import Store


def cluster_label(settings: Settings) -> str:
    # the name flows give incidents and node records (tasks.context.cluster_name_for)
    return "demo" if settings.cluster == "demo" else settings.slurm.cluster_name


def build_collector(settings: Settings, store: Store, prefect_api_url: str | None,
                    on_change: Callable[[SourceResult], None] | None = None) -> PitstopCollector:
    from pitstop.cluster.factory import make_scheduler

    m = settings.metrics
    sources = [
        StoreSource(store, settings, cluster_label(settings)),
        SpoolSource(settings.spool_dir),
        ClusterSource(lambda: make_scheduler(settings), cluster_label(settings), m.cluster_min_interval_s),
        PrefectSweepSource(prefect_api_url, timeout_s=m.source_timeout_s),
    ]
    return PitstopCollector(sources, timeout_s=m.source_timeout_s, on_change=on_change)


def registry_for(collector: PitstopCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)  # a registry per process: no global state
    registry.register(collector)
    return registry


def render(collector: PitstopCollector) -> bytes:
    """The Prometheus text exposition, exactly what GET /metrics answers."""
    return generate_latest(registry_for(collector))


def describe_change(result: SourceResult) -> str:
    if result.ok:
        return f"metrics: {result.source} answers again"
    return f"metrics: {result.source} is down ({result.error}); pitstop_source_up{{source=\"{result.source}\"}} is 0"


class MetricsServer:
    """/metrics on settings.metrics.bind:port in a daemon thread; `stop` closes the socket."""

    def __init__(self, settings: Settings, prefect_api_url: str | None,
                 on_message: Callable[[str], None] = lambda _m: None) -> None:
        self.settings = settings
        self.prefect_api_url = prefect_api_url
        self.on_message = on_message
        self._httpd = None
        self._store: Store | None = None

    @property
    def url(self) -> str:
        m = self.settings.metrics
        host = f"[{m.bind}]" if ":" in m.bind else m.bind
        return f"http://{host}:{m.port}/metrics"

    def start(self) -> bool:
        """True when serving. A busy port is said and tolerated: remediation matters more than metrics."""
        from prometheus_client import start_http_server

        m = self.settings.metrics
        if not m.enabled:
            self.on_message("metrics: off (metrics.enabled = false)")
            return False
        try:
            self._store = Store.from_settings(self.settings)
        except Exception as exc:  # the flows will say it too; /metrics must not take `up` down
            self.on_message(f"metrics: off, the store cannot be opened ({exc})")
            return False
        collector = build_collector(self.settings, self._store, self.prefect_api_url,
                                    on_change=lambda r: self.on_message(describe_change(r)))
        try:
            self._httpd, _thread = start_http_server(m.port, addr=m.bind, registry=registry_for(collector))
        except OSError as exc:
            self.on_message(f"metrics: cannot listen on {m.bind}:{m.port} ({exc.strerror or exc}); "
                            "running without /metrics: set PITSTOP_METRICS__PORT to a free port")
            self._store.dispose()
            self._store = None
            return False
        return True

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._store is not None:
            self._store.dispose()
            self._store = None
