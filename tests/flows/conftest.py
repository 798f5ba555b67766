"""Flow tests run the real flows on the demo cluster against the session's Prefect server."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop.cluster.demo import DemoCluster


@pytest.fixture
def demo(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> DemoCluster:
    monkeypatch.setenv("PITSTOP_CLUSTER", "demo")
    monkeypatch.setenv("PITSTOP_MODE", "act")
    return DemoCluster.create(isolated_home / "demo", nodes=8, seed=3)
