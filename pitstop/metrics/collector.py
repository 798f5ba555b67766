"""A prometheus_client custom collector: reads every source at scrape time, each time-boxed.

All sources are started at once and share one deadline, so a scrape takes at most
`source_timeout_s` however many sources hang. A source that fails or is late is reported as
`pitstop_source_up{source=...} 0` and its metrics are left out of that scrape (Prometheus then
marks them stale) rather than shown as zeros.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from pitstop.metrics.catalog import BY_NAME, Kind, MetricSpec
from pitstop.metrics.samples import HistogramSample, Sample, Source
from pitstop.metrics.timebox import SourceResult, TimeBoxed

FAMILY_TYPES = {Kind.GAUGE: GaugeMetricFamily, Kind.COUNTER: CounterMetricFamily, Kind.HISTOGRAM: HistogramMetricFamily}


class UnknownMetric(ValueError):
    """A source produced a sample whose name is not in the catalog (a bug in that source)."""


def _family(spec: MetricSpec) -> Metric:
    return FAMILY_TYPES[spec.kind](spec.name, spec.help, labels=list(spec.labels))


def families(samples: Iterable[Sample | HistogramSample]) -> list[Metric]:
    """Samples grouped into families in catalog order; each sample's labels as the catalog names them."""
    built: dict[str, Metric] = {}
    for sample in samples:
        spec = BY_NAME.get(sample.metric)
        if spec is None:
            raise UnknownMetric(f"{sample.metric} is not in pitstop.metrics.catalog.METRICS")
        family = built.get(spec.name) or built.setdefault(spec.name, _family(spec))
        values = [sample.labels.get(label, "") for label in spec.labels]
        if isinstance(sample, HistogramSample):
            buckets = [(floatToGoString(le), n) for le, n in sample.buckets] + [("+Inf", sample.count)]
            family.add_metric(values, buckets=buckets, sum_value=sample.sum)
        else:
            family.add_metric(values, sample.value)
    order = list(BY_NAME)
    return [built[name] for name in sorted(built, key=order.index)]


class PitstopCollector:
    """Register on a `CollectorRegistry`; `last_results` holds the latest scrape's per-source outcome."""

    def __init__(self, sources: Iterable[Source], timeout_s: float,
                 on_change: Callable[[SourceResult], None] | None = None) -> None:
        self.boxes = [TimeBoxed(s) for s in sources]
        self.timeout_s = timeout_s
        self.on_change = on_change
        self.last_results: list[SourceResult] = []
        self._lock = threading.Lock()
        self._was_ok: dict[str, bool] = {}

    def describe(self) -> list[Metric]:
        return []  # registering must not read the store; names are checked by the catalog's tests

    def read_sources(self) -> list[SourceResult]:
        calls = [(box, box.start()) for box in self.boxes]
        deadline = time.monotonic() + self.timeout_s
        results = [box.result(call, deadline) for box, call in calls]
        self._note(results)
        return results

    def _note(self, results: list[SourceResult]) -> None:
        with self._lock:
            self.last_results = results
            changed = [r for r in results if self._was_ok.get(r.source, True) != r.ok]
            self._was_ok.update({r.source: r.ok for r in results})
        if self.on_change:
            for result in changed:
                self.on_change(result)

    def collect(self) -> Iterator[Metric]:
        results = self.read_sources()
        samples: list[Sample | HistogramSample] = []
        for r in results:
            samples += r.samples
            samples.append(Sample(metric="pitstop_source_up", value=1.0 if r.ok else 0.0, labels={"source": r.source}))
            samples.append(Sample(metric="pitstop_source_duration_seconds", value=round(r.seconds, 6),
                                  labels={"source": r.source}))
        yield from families(samples)
