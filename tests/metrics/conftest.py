"""Stores for the collector tests: the same test on SQLite and on the dev cluster's PostgreSQL
(the latency histogram is dialect-specific SQL), and a scrape parsed the way Prometheus would."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pitstop.store import Store
from tests.store.conftest import fresh_database


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        s = Store(f"sqlite:///{tmp_path}/pitstop.db")
        yield s
        s.dispose()
        return
    with fresh_database("pitstop_metrics") as url:
        s = Store(url)
        yield s
        s.dispose()


def parse(text: str | bytes) -> dict[tuple[str, frozenset], float]:
    """(sample name, labels) -> value, from the Prometheus text format, with prometheus_client's parser."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def matching(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> dict[frozenset, float]:
    """Every sample of `name` whose labels include `labels`."""
    want = set(labels.items())
    return {lab: v for (n, lab), v in samples.items() if n == name and want <= lab}
