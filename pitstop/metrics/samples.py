"""What a source hands the collector: plain samples by metric name, no prometheus_client types."""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, Field


class Sample(BaseModel):
    metric: str = Field(description="a name from pitstop.metrics.catalog.METRICS")
    labels: dict[str, str] = Field(default_factory=dict)
    value: float


class HistogramSample(BaseModel):
    metric: str
    labels: dict[str, str] = Field(default_factory=dict)
    buckets: list[tuple[float, float]] = Field(
        description="(upper bound, cumulative count) in ascending order, without +Inf"
    )
    count: float = Field(ge=0, description="all observations (the +Inf bucket)")
    sum: float


Reading = list[Sample | HistogramSample]


class Source(Protocol):
    """One place metrics are read from. `read` may block; the collector time-boxes it."""

    name: str

    def read(self) -> Reading: ...
