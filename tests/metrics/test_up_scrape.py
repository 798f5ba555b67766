"""The acceptance test: a real `pitstop up` on the demo cluster, a real demo incident, a real HTTP
scrape of /metrics parsed by prometheus_client, and there are the incident, the action and the
node state. Then a health sweep run through Prefect shows up as the sweep's duration and counts.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pitstop.cluster.demo import DemoCluster
from pitstop.events.deliver import PrefectEventsClient
from pitstop.events.models import JobEnded
from pitstop.processes import stop_process_group
from pitstop.store import Store
from pitstop.store.tables import Incident
from tests.flows.conftest import wait_for, write_policy
from tests.metrics.conftest import matching, parse, value
from tests.support.net import free_port
from tests.triggers.conftest import PrefectRest, warm_prefect  # noqa: F401  (session fixture)
from tests.triggers.up import start_up, up_env

pytestmark = [pytest.mark.prefect, pytest.mark.slow]

# A rule tried before the built-in ones, so the actions do not depend on the default policy's
# ladder: Xid 79 ("GPU has fallen off the bus", NVIDIA Xid catalog) -> drain, requeue elsewhere.
XID79_RULE = {"cause": "gpu_hardware", "signature": "xid-79", "description": "test: drain and requeue",
              "actions": ["drain", {"requeue": {"exclude_faulty_nodes": True}}, "notify_ops"]}


def _scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.headers.get_content_type() == "text/plain"
        return parse(response.read())


def _answers(url: str) -> bool:
    try:
        _scrape(url)
        return True
    except (urllib.error.URLError, OSError):
        return False


def _busy_retried(call, attempts: int = 20):
    """A Prefect REST call, again while the server answers 503 (its SQLite is busy with the
    flows' writes: what Pitstop's own reconciliation exists for)."""
    for attempt in range(attempts):
        try:
            return call()
        except urllib.error.HTTPError as exc:
            if exc.code != 503 or attempt == attempts - 1:
                raise
            time.sleep(1)


def _incidents(home: Path) -> list[Incident]:
    from sqlmodel import select

    store = Store(f"sqlite:///{home / 'pitstop.db'}")
    try:
        with store.session() as s:
            return list(s.exec(select(Incident)))
    finally:
        store.dispose()


def _label_values(samples: dict, name: str, label: str, **labels: str) -> dict[str, float]:
    return {dict(k)[label]: v for k, v in matching(samples, name, **labels).items()}


def test_scrape_of_a_running_pitstop_up_shows_the_demo_incident(
        warm_prefect, isolated_home: Path, tmp_path: Path) -> None:  # noqa: F811
    demo = DemoCluster.create(isolated_home / "demo", nodes=8, seed=3)
    [fault] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])
    job = demo.job(fault.job_id)
    bad_node = fault.nodes[0]
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    env = up_env(isolated_home, warm_prefect.api_url, MODE="act", METRICS__PORT=str(port),
                 METRICS__CLUSTER_MIN_INTERVAL_S="0",  # the live view at every scrape, not 15 s old
                 POLICY__FILE=str(write_policy(tmp_path / "policy.yaml", [XID79_RULE])))
    rest = PrefectRest(warm_prefect.api_url)
    log = isolated_home.parent / "pitstop-up.log"
    proc = start_up(env, log, rest, timeout_s=240)
    try:
        wait_for(lambda: _answers(url), 30, f"{url} to answer", interval=0.5, log=log)
        assert f"Metrics:     {url}" in log.read_text(errors="replace")
        before = _scrape(url)
        assert _label_values(before, "pitstop_source_up", "source") == {"store": 1, "spool": 1, "cluster": 1, "prefect": 1}
        assert not matching(before, "pitstop_incidents")

        event = JobEnded(cluster="demo", job_id=job.job_id, state="FAILED", exit_code=1, nodes=job.nodes,
                         end_time=datetime.now(timezone.utc))
        PrefectEventsClient(warm_prefect.api_url, timeout_s=30).send([event.to_wire().to_api()])
        wait_for(lambda: [i for i in _incidents(isolated_home) if i.status == "done"], 240,
                 "the demo incident to be remediated", interval=1, log=log)

        m = _scrape(url)
        # the incident, by cause
        assert value(m, "pitstop_incidents", cluster="demo", kind="job", cause="gpu_hardware", status="done") == 1
        assert value(m, "pitstop_incidents_created_total", cluster="demo", kind="job") == 1
        assert value(m, "pitstop_classifier_verdicts", source="incident", cause="gpu_hardware") == 1
        # the actions, by kind and outcome, and how long after the job's end they started
        finished = _label_values(m, "pitstop_actions_finished_total", "kind", outcome="done")
        assert finished.get("drain") == 1 and finished.get("requeue") == 1, finished
        assert value(m, "pitstop_event_to_action_seconds_count", kind="drain") == 1
        assert 0 <= value(m, "pitstop_event_to_action_seconds_sum", kind="drain") < 240
        # the node state: recorded by Pitstop, and live from the cluster adapter, both drained by Pitstop
        shown = demo.node(bad_node)
        state = "+".join([shown.state, *shown.flags])
        assert value(m, "pitstop_nodes", cluster="demo", state=state, drain_owner="pitstop") == 1
        assert _label_values(m, "pitstop_cluster_nodes", "state", cluster="demo", drain_owner="pitstop") == {state: 1}
        assert sum(matching(m, "pitstop_cluster_nodes", cluster="demo").values()) == 8
        assert value(m, "pitstop_mode", mode="act") == 1
        assert value(m, "pitstop_spool_events", spool=str(isolated_home / "spool"), state="bad") == 0

        # a health sweep through Prefect: its run time (from Prefect) and every node's result (store)
        deployment = wait_for(lambda: _busy_retried(lambda: rest.deployment("health-sweep", "health-sweep")), 60,
                              "the health-sweep deployment (served by the runner)", interval=1, log=log)
        started = time.time()
        run = _busy_retried(lambda: rest.post(f"/deployments/{deployment['id']}/create_flow_run", {}))
        state_of = lambda: next(r for r in _busy_retried(lambda: rest.flow_runs(deployment["id"]))  # noqa: E731
                                if r["id"] == run["id"])["state_type"]
        wait_for(lambda: state_of() in {"COMPLETED", "FAILED", "CRASHED"}, 240, "the health sweep", interval=1, log=log)
        assert state_of() == "COMPLETED"
        m = _scrape(url)
        assert value(m, "pitstop_sweep_last_succeeded") == 1
        assert 0 < value(m, "pitstop_sweep_last_duration_seconds") < 240
        assert value(m, "pitstop_sweep_last_end_timestamp_seconds") >= started
        results = _label_values(m, "pitstop_sweep_nodes", "result", cluster="demo")
        assert sum(results.values()) == 8 and results.get("FAIL", 0) >= 1, results  # the GPU still off the bus
    finally:
        stop_process_group(proc, grace_s=30)
    assert not _answers(url)  # stopped with `pitstop up`
