"""Spool, cluster and Prefect sources, and the time box that keeps a scrape from hanging on them."""

from __future__ import annotations

import shutil
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from pitstop.cluster.demo import DemoCluster
from pitstop.cluster.slurm import SlurmScheduler
from pitstop.config import Settings, SlurmSettings
from pitstop.events.models import JobEnded
from pitstop.events.spool import Spool
from pitstop.metrics.cluster_source import ClusterSource
from pitstop.metrics.collector import PitstopCollector, UnknownMetric, families
from pitstop.metrics.exporter import render
from pitstop.metrics.prefect_source import PrefectSweepSource
from pitstop.metrics.samples import Sample
from pitstop.metrics.spool_source import SpoolSource
from pitstop.metrics.store_source import StoreSource
from pitstop.store import Store
from tests.cluster.conftest import dev_cluster_env, slurm_cluster  # noqa: F401  (session fixtures)
from tests.conftest import FIXTURES
from tests.metrics.conftest import matching, parse, value
from tests.support.net import silent_listener
from tests.triggers.conftest import closed_port_url

SINFO_JSON = FIXTURES / "slurm" / "sinfo.json"  # real `sinfo --json` of Slurm 22.05.8 (the dev cluster)


def test_spool_depth_and_oldest_pending_age(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    now = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
    for minutes in (30, 5):
        spool.write(JobEnded(cluster="c1", job_id=str(minutes), state="FAILED", exit_code=1, nodes=["gpu01"],
                             end_time=now - timedelta(minutes=minutes)).to_wire())
    delivered = spool.pending_paths()[1]
    spool.mark_sent(delivered, keep=10)
    (spool.bad).mkdir(exist_ok=True)
    (spool.bad / "x.json").write_text("{not json")
    source = SpoolSource(tmp_path / "spool", spools=lambda d: [Spool(d)], clock=now.timestamp)
    m = parse(render(PitstopCollector([source], timeout_s=10)))
    where = str(tmp_path / "spool")
    assert value(m, "pitstop_spool_events", spool=where, state="pending") == 1
    assert value(m, "pitstop_spool_events", spool=where, state="sent") == 1
    assert value(m, "pitstop_spool_events", spool=where, state="bad") == 1
    assert value(m, "pitstop_spool_oldest_pending_age_seconds", spool=where) == pytest.approx(1800, abs=0.01)


def test_missing_spool_reads_as_empty_not_down(tmp_path: Path) -> None:
    m = parse(render(PitstopCollector([SpoolSource(tmp_path / "nowhere", spools=lambda d: [Spool(d)])], timeout_s=10)))
    assert value(m, "pitstop_source_up", source="spool") == 1
    assert value(m, "pitstop_spool_events", spool=str(tmp_path / "nowhere"), state="pending") == 0


def test_cluster_nodes_by_state_and_owner_on_the_demo_cluster(tmp_path: Path) -> None:
    demo = DemoCluster.create(tmp_path / "demo", nodes=4, seed=1)
    demo.drain("gpu01", "pitstop: gpu_hardware xid-79 incident 1")
    demo.drain("gpu02", "fan replacement (ops)")
    clock = [0.0]
    source = ClusterSource(lambda: DemoCluster(tmp_path / "demo"), "demo", min_interval_s=15, clock=lambda: clock[0])
    collector = PitstopCollector([source], timeout_s=10)

    def owners() -> dict[str, float]:
        m = parse(render(collector))
        return {dict(k)["drain_owner"]: v for k, v in matching(m, "pitstop_cluster_nodes", cluster="demo").items()}

    assert owners() == {"pitstop": 1, "foreign": 1, "none": 2}
    demo.resume("gpu02")
    clock[0] = 10.0  # within min_interval_s: the last answer, the scheduler is not asked again
    assert owners() == {"pitstop": 1, "foreign": 1, "none": 2}
    clock[0] = 16.0
    assert owners() == {"pitstop": 1, "none": 3}


@pytest.mark.cluster
def test_cluster_source_on_the_real_dev_cluster(slurm_cluster) -> None:  # noqa: F811
    source = ClusterSource(slurm_cluster.scheduler, "dev", min_interval_s=0)
    m = parse(render(PitstopCollector([source], timeout_s=30)))
    assert value(m, "pitstop_source_up", source="cluster") == 1
    assert sum(matching(m, "pitstop_cluster_nodes", cluster="dev").values()) == len(slurm_cluster.nodes)


def _slow_sinfo(bin_dir: Path, calls: Path, sleep_s: float) -> None:
    """An sinfo that takes `sleep_s` (slurmctld under load), then prints a real sinfo --json."""
    bin_dir.mkdir()
    shutil.copy(SINFO_JSON, bin_dir / "sinfo.json")
    script = bin_dir / "sinfo"
    script.write_text(f"#!/bin/sh\necho call >> {calls}\nsleep {sleep_s}\ncat {bin_dir / 'sinfo.json'}\n")
    script.chmod(0o755)


def test_a_hung_scheduler_costs_one_time_box_and_one_call(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    _slow_sinfo(tmp_path / "bin", calls, sleep_s=3)
    slurm = SlurmSettings(bin_dir=tmp_path / "bin", command_timeout_s=30)
    source = ClusterSource(lambda: SlurmScheduler(slurm), "c1", min_interval_s=60)
    spool = SpoolSource(tmp_path / "spool", spools=lambda d: [Spool(d)])
    collector = PitstopCollector([source, spool], timeout_s=1.0)
    for _ in range(2):
        started = time.monotonic()
        m = parse(render(collector))
        assert time.monotonic() - started < 2.5
        assert value(m, "pitstop_source_up", source="cluster") == 0
        assert value(m, "pitstop_source_up", source="spool") == 1  # the others are not held up
        assert not matching(m, "pitstop_cluster_nodes")  # absent, not zero
    assert "still waiting" in next(r.error for r in collector.last_results if r.source == "cluster")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and value(parse(render(collector)), "pitstop_source_up", source="cluster") != 1:
        time.sleep(0.5)
    m = parse(render(collector))
    assert value(m, "pitstop_cluster_nodes", cluster="c1", state="IDLE+DRAIN", drain_owner="foreign") == 1
    assert value(m, "pitstop_cluster_nodes", cluster="c1", state="IDLE", drain_owner="none") == 2
    assert calls.read_text().count("call") == 1  # the second scrape waited on the first call


def test_missing_scheduler_tool_is_a_down_source_with_the_reason(tmp_path: Path) -> None:
    source = ClusterSource(lambda: SlurmScheduler(SlurmSettings(bin_dir=tmp_path)), "c1", min_interval_s=0)
    collector = PitstopCollector([source], timeout_s=10)
    assert value(parse(render(collector)), "pitstop_source_up", source="cluster") == 0
    assert "sinfo not found" in collector.last_results[0].error


def test_prefect_unreachable_or_silent_reads_as_down_within_the_time_box() -> None:
    collector = PitstopCollector([PrefectSweepSource(closed_port_url(), timeout_s=5)], timeout_s=5)
    assert value(parse(render(collector)), "pitstop_source_up", source="prefect") == 0
    assert "unreachable" in collector.last_results[0].error
    with silent_listener() as port:  # accepts, never answers: a wedged server
        collector = PitstopCollector([PrefectSweepSource(f"http://127.0.0.1:{port}/api", timeout_s=30)], timeout_s=1)
        started = time.monotonic()
        m = parse(render(collector))
        assert time.monotonic() - started < 2.5 and value(m, "pitstop_source_up", source="prefect") == 0
    collector = PitstopCollector([PrefectSweepSource(None, timeout_s=5)], timeout_s=5)
    render(collector)
    assert "no Prefect API URL" in collector.last_results[0].error


def test_a_corrupt_database_is_a_down_store_not_a_failed_scrape(tmp_path: Path) -> None:
    db = tmp_path / "pitstop.db"
    store = Store(f"sqlite:///{db}")
    store.dispose()
    for extra in ("-wal", "-shm"):
        Path(f"{db}{extra}").unlink(missing_ok=True)
    db.write_bytes(b"this is not a database" * 100)
    changes = []
    collector = PitstopCollector([StoreSource(store, Settings()), SpoolSource(tmp_path / "spool")],
                                 timeout_s=10, on_change=changes.append)
    m = parse(render(collector))
    assert value(m, "pitstop_source_up", source="store") == 0 and value(m, "pitstop_source_up", source="spool") == 1
    assert [c.source for c in changes] == ["store"] and "DatabaseError" in changes[0].error
    render(collector)
    assert len(changes) == 1  # said once, not at every scrape


def test_a_sample_outside_the_catalog_is_refused() -> None:
    with pytest.raises(UnknownMetric, match="pitstop_made_up"):
        families([Sample(metric="pitstop_made_up", value=1)])


def test_scrapes_at_once_share_one_read(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    _slow_sinfo(tmp_path / "bin", calls, sleep_s=1)
    source = ClusterSource(lambda: SlurmScheduler(SlurmSettings(bin_dir=tmp_path / "bin")), "c1", min_interval_s=0)
    collector = PitstopCollector([source], timeout_s=10)
    results: list[dict] = []
    threads = [threading.Thread(target=lambda: results.append(parse(render(collector)))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 4 and all(value(m, "pitstop_source_up", source="cluster") == 1 for m in results)
    assert calls.read_text().count("call") == 1
