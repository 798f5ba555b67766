"""A burst of failed-job events with the Prefect server stopped in the middle of it: how many
jobs get their incident, and how soon, with reconciliation and without.

    .venv/bin/python bench/event_burst.py [--events 50] [--outage-s 5] [--skip-baseline]
    .venv/bin/python bench/event_burst.py --cluster demo --nodes 2048 --events 500 [--over-s 60]

The second form is the burst at size (no outage): a demo cluster of --nodes nodes under leaf
switches of 32 (Slurm topology.conf layout), one leaf switch fails and --events jobs on its
nodes end with the fabric fault, their epilogs spread over --over-s seconds, through a running
`pitstop up` in act mode. It prints the event-to-decision latency (p50/p99/max: from the start
of a job's epilog to the first journaled action of its incident), the counts (incidents, lost,
duplicates) and what the storm guard let through (drains, breakers), and exits 1 unless every
event got exactly one incident.

What runs (all real processes on 127.0.0.1): a local Prefect server (SQLite), `pitstop up`
serving the deployments (fast lane on, demo cluster, observe mode), and N `pitstop epilog`
processes, 8 at a time, as Slurm runs them when many jobs end at once (a mass cancel, a switch
failure). Half-way through the burst the server is stopped (SIGTERM) for --outage-s and
started again: epilogs meanwhile spool their events, `pitstop up` delivers them afterwards, and
automation actions that were in flight are lost, as with the 503 / "database is locked" answers
of a loaded server. Each round uses its own cluster name, so incidents are counted per round.

Round 1: reconciliation on (every 5 s, grace 10 s). Round 2 (the baseline): reconciliation off,
Prefect's automation alone. Prints, per round: events sent, events Prefect stored, flow runs
(automation / reconciliation), incidents, and the time from the end of the burst to the last
incident.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
PITSTOP = REPO / ".venv" / "bin" / "pitstop"

from pitstop.processes import stop_process_group  # noqa: E402  (after the path set-up)



def wait_until_ready(up: subprocess.Popen, log_path: Path) -> None:
    """Until `pitstop up` says it is serving (and a moment for its automations to settle)."""
    deadline = time.monotonic() + 180
    while b"ready: " not in log_path.read_bytes():
        if time.monotonic() > deadline or up.poll() is not None:
            raise SystemExit(f"pitstop up did not start; see {log_path}")
        time.sleep(0.5)
    time.sleep(2)

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rest(api_url: str, path: str, body: dict) -> object:
    req = urllib.request.Request(api_url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        raw = r.read()
    return json.loads(raw) if raw else None


class Server:
    """The local Prefect server the rounds share; stopped and started again for the outage."""

    def __init__(self, home: Path, port: int) -> None:
        self.home, self.port, self.handle = home, port, None

    def start(self) -> float:
        from deployments.local_server import start_local_server

        t = time.monotonic()
        self.handle = start_local_server(self.home, self.port)
        return time.monotonic() - t

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.stop()
            self.handle = None


def incidents(home: Path, cluster: str) -> list[tuple[str, str]]:
    db = home / "pitstop.db"
    if not db.exists():
        return []
    try:
        with sqlite3.connect(db, timeout=10) as conn:
            return conn.execute("SELECT job_id, created_at FROM incidents WHERE cluster = ?", (cluster,)).fetchall()
    except sqlite3.OperationalError:
        return []  # not created yet


def stored_events(api_url: str, cluster: str, since: datetime) -> int:
    body = {"filter": {"event": {"name": ["pitstop.job.ended"]}, "occurred": {"since": since.isoformat()},
                       "resource": {"labels": {"pitstop.cluster": [cluster]}}}, "limit": 1}
    return rest(api_url, "/events/filter", body).get("total", 0)


def flow_runs(api_url: str, cluster: str) -> tuple[int, int]:
    found = rest(api_url, "/deployments/filter", {"deployments": {"name": {"any_": ["post-failure"]}}})
    if not found:
        return 0, 0
    runs, offset = [], 0
    while True:
        page = rest(api_url, "/flow_runs/filter", {"deployments": {"id": {"any_": [found[0]["id"]]}},
                                                    "limit": 200, "offset": offset})
        runs += page
        if len(page) < 200:
            break
        offset += 200
    mine = [r for r in runs if r["parameters"].get("cluster") == cluster]
    reconciled = sum(1 for r in mine if "pitstop-reconciled" in r["tags"])
    return len(mine) - reconciled, reconciled


def epilog(home: Path, api_url: str, cluster: str, job_id: int, nodelist: str = "gpu01") -> None:
    env = {"PITSTOP_HOME": str(home), "PREFECT_API_URL": api_url, "SLURM_JOB_ID": str(job_id),
           "SLURM_CLUSTER_NAME": cluster, "SLURM_JOB_EXIT_CODE2": "1:0", "SLURM_JOB_NODELIST": nodelist,
           "SLURM_JOB_END_TIME": str(int(time.time()))}
    subprocess.run([str(PITSTOP), "epilog"], env=env, timeout=60, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def round_(work: Path, server: Server, events: int, outage_s: float, reconcile: bool, wait_s: float,
           quiet_s: float) -> dict:
    name = "with-reconcile" if reconcile else "baseline"
    home = work / name
    cluster = f"burst-{uuid.uuid4().hex[:6]}"
    api_url = f"http://127.0.0.1:{server.port}/api"
    env = {**os.environ, "PITSTOP_HOME": str(home), "PITSTOP_CLUSTER": "demo", "PREFECT_API_URL": api_url,
           "PITSTOP_TRIGGERS__HEALTH_SWEEP_CRON": "0 0 1 1 *", "PITSTOP_TRIGGERS__FLUSH_INTERVAL_S": "2",
           "PITSTOP_TRIGGERS__RECONCILE_INTERVAL_S": "5" if reconcile else "0",
           "PITSTOP_TRIGGERS__RECONCILE_GRACE_S": "10", "PITSTOP_TRIGGERS__RECONCILE_LOOKBACK_S": "3600"}
    log_path = work / f"pitstop-up-{name}.log"
    with log_path.open("wb") as log:
        up = subprocess.Popen([str(PITSTOP), "up"], env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        wait_until_ready(up, log_path)
        since = datetime.now(timezone.utc) - timedelta(minutes=1)
        started = time.monotonic()
        first_job = 100_000
        with ThreadPoolExecutor(max_workers=8) as pool:
            half = [pool.submit(epilog, home, api_url, cluster, first_job + i) for i in range(events // 2)]
            for f in half:
                f.result()
            server.stop()  # the outage, mid-burst
            rest_of = [pool.submit(epilog, home, api_url, cluster, first_job + i) for i in range(events // 2, events)]
            time.sleep(outage_s)
            took = server.start()
            print(f"  [{name}] server back after the {outage_s:g} s outage (+{took:.1f} s to start)")
            for f in rest_of:
                f.result()
        burst_end = time.monotonic()
        last_count, last_change = -1, time.monotonic()
        while time.monotonic() - burst_end < wait_s:
            rows = incidents(home, cluster)
            if len(rows) != last_count:
                last_count, last_change = len(rows), time.monotonic()
            if len(rows) >= events or time.monotonic() - last_change > quiet_s:
                break  # all there, or nothing new for quiet_s: what is missing stays missing
            time.sleep(1)
        rows = incidents(home, cluster)
        automatic, reconciled = flow_runs(api_url, cluster)
        return {"name": name, "sent": events, "stored": stored_events(api_url, cluster, since),
                "automation_runs": automatic, "reconciled_runs": reconciled, "incidents": len(rows),
                "distinct": len({r[0] for r in rows}), "burst_s": burst_end - started,
                "last_incident_s": (last_change - burst_end) if rows else None, "log": log_path}
    finally:
        stop_process_group(up, grace_s=30)


def decisions(home: Path, cluster: str) -> dict[str, list[tuple[int, datetime]]]:
    """job id -> [(incident id, when its first action was journaled)] for decided incidents."""
    db = home / "pitstop.db"
    if not db.exists():
        return {}
    try:
        with sqlite3.connect(db, timeout=10) as conn:
            found = conn.execute(
                "SELECT i.job_id, i.id, MIN(a.created_at) FROM incidents i JOIN actions a ON a.incident_id = i.id "
                "WHERE i.cluster = ? GROUP BY i.id", (cluster,)).fetchall()
    except sqlite3.OperationalError:
        return {}  # not created yet
    out: dict[str, list[tuple[int, datetime]]] = {}
    for job_id, incident_id, at in found:
        out.setdefault(job_id, []).append((incident_id, datetime.fromisoformat(at).replace(tzinfo=timezone.utc)))
    return out


def open_breakers(home: Path) -> list[tuple[str, str]]:
    try:
        with sqlite3.connect(home / "pitstop.db", timeout=10) as conn:
            return conn.execute("SELECT scope, reason FROM breakers WHERE is_open").fetchall()
    except sqlite3.OperationalError:
        return []


def storm_counts(home: Path, cluster: str) -> dict[str, int]:
    """Fabric incidents opened, approval questions asked, and ops notices sent (the outbox keeps
    one file per notice and audience)."""
    counts = {"fabric_incidents": 0, "questions": 0,
              "ops_notices": len(list((home / "outbox").glob("*-ops.json"))) if (home / "outbox").is_dir() else 0}
    try:
        with sqlite3.connect(home / "pitstop.db", timeout=10) as conn:
            counts["fabric_incidents"] = conn.execute(
                "SELECT COUNT(*) FROM incidents WHERE cluster = ? AND kind = 'switch'", (cluster,)).fetchone()[0]
            counts["questions"] = conn.execute(
                "SELECT COUNT(*) FROM actions a JOIN incidents i ON i.id = a.incident_id WHERE i.cluster = ? "
                "AND json_extract(a.params, '$.approval') IS NOT NULL", (cluster,)).fetchone()[0]
    except sqlite3.OperationalError:
        pass
    return counts


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered) + 0.5)) - 1))]


def burst_at_size(work: Path, server: Server, nodes: int, events: int, over_s: float, wait_s: float,
                  quiet_s: float, switch: str) -> dict:
    from pitstop.cluster.demo import DemoCluster
    from pitstop.cluster.hostlist import compress

    home = work / "at-size"
    cluster = f"burst-{uuid.uuid4().hex[:6]}"
    api_url = f"http://127.0.0.1:{server.port}/api"
    demo = DemoCluster.create(home / "demo", nodes=nodes, seed=11)
    failed = demo.fail_switch(switch, events, seed=11)
    env = {**os.environ, "PITSTOP_HOME": str(home), "PITSTOP_CLUSTER": "demo", "PITSTOP_MODE": "act",
           "PREFECT_API_URL": api_url, "PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S": "2",
           "PITSTOP_TRIGGERS__HEALTH_SWEEP_CRON": "0 0 1 1 *", "PITSTOP_TRIGGERS__FLUSH_INTERVAL_S": "2",
           "PITSTOP_TRIGGERS__RECONCILE_INTERVAL_S": "5", "PITSTOP_TRIGGERS__RECONCILE_GRACE_S": "10",
           "PITSTOP_TRIGGERS__RECONCILE_LOOKBACK_S": "3600"}
    log_path = work / "pitstop-up-at-size.log"
    with log_path.open("wb") as log:
        up = subprocess.Popen([str(PITSTOP), "up"], env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    sent: dict[str, datetime] = {}

    def fire(index: int) -> None:
        # the job ends at its slot in the burst; the epilog starts then (Slurm runs it at job end)
        time.sleep(max(0.0, started + index * over_s / events - time.monotonic()))
        job = failed[index]
        sent[job.job_id] = datetime.now(timezone.utc)
        epilog(home, api_url, cluster, int(job.job_id), compress(job.nodes))

    try:
        wait_until_ready(up, log_path)
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(fire, range(events)))
        burst_end = time.monotonic()
        last_count, last_change = -1, time.monotonic()
        while time.monotonic() - burst_end < wait_s:
            found = decisions(home, cluster)
            if len(found) != last_count:
                last_count, last_change = len(found), time.monotonic()
            if len(found) >= events or time.monotonic() - last_change > quiet_s:
                break
            time.sleep(1)
        found = decisions(home, cluster)
        latencies = [(min(at for _, at in found[j]) - sent[j]).total_seconds() for j in sent if j in found]
        drains = [a for a in demo.actions() if a.op == "drain"]
        return {"sent": len(sent), "incidents": sum(len(v) for v in found.values()), "distinct": len(found),
                "duplicates": sum(len(v) - 1 for v in found.values()), "lost": len(set(sent) - set(found)),
                "latencies": latencies, "burst_s": burst_end - started, "switch": switch,
                "switch_nodes": len(demo.topology()[switch]), "drained_nodes": sorted({a.target for a in drains}),
                "breakers": open_breakers(home), "log": log_path, **storm_counts(home, cluster),
                "automation_runs": flow_runs(api_url, cluster)}
    finally:
        stop_process_group(up, grace_s=30)


def main_at_size(args) -> int:
    work = Path(tempfile.mkdtemp(prefix="pitstop-burst-size-"))
    server = Server(work / "server", free_port())
    took = server.start()
    print(f"local Prefect server on port {server.port} up in {took:.1f} s; {args.events} job-ended events "
          f"from the nodes of switch {args.switch} over {args.over_s:g} s, demo cluster of {args.nodes} nodes")
    try:
        r = burst_at_size(work, server, args.nodes, args.events, args.over_s, args.wait_s, args.quiet_s, args.switch)
    finally:
        server.stop()
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n{os.cpu_count()} CPUs, load average {load} at the end; logs in {work}")
    lat = r["latencies"]
    if lat:
        print(f"event-to-decision latency over {len(lat)} events: p50 {percentile(lat, 50):.1f} s, "
              f"p99 {percentile(lat, 99):.1f} s, max {max(lat):.1f} s (burst sent in {r['burst_s']:.1f} s)")
    auto, reconciled = r["automation_runs"]
    print(f"incidents {r['distinct']}/{r['sent']}, duplicates {r['duplicates']}, lost {r['lost']}; "
          f"flow runs {auto} automation + {reconciled} reconciliation")
    print(f"storm guard: {len(r['drained_nodes'])} of switch {r['switch']}'s {r['switch_nodes']} nodes drained "
          f"({','.join(r['drained_nodes'][:8]) or '-'}); open breakers: "
          f"{'; '.join(f'{s}: {why}' for s, why in r['breakers']) or 'none'}")
    print(f"fabric incidents {r['fabric_incidents']}; steps put to a human {r['questions']}; "
          f"ops notices {r['ops_notices']} (one per job before the storm was seen, one for the storm)")
    return 0 if r["distinct"] == r["sent"] == args.events and r["duplicates"] == 0 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=50)
    ap.add_argument("--cluster", choices=["dev", "demo"], default="dev",
                    help="demo: the burst at size (see above); dev: the outage rounds")
    ap.add_argument("--nodes", type=int, default=2048, help="--cluster demo: nodes in the demo cluster")
    ap.add_argument("--over-s", type=float, default=60.0, help="--cluster demo: the burst's length")
    ap.add_argument("--switch", default="leaf07", help="--cluster demo: the leaf switch that fails")
    ap.add_argument("--outage-s", type=float, default=5.0)
    ap.add_argument("--wait-s", type=float, default=300.0, help="after the burst, how long to wait for incidents")
    ap.add_argument("--quiet-s", type=float, default=60.0, help="stop waiting after this long without a new incident")
    ap.add_argument("--skip-baseline", action="store_true", help="only the round with reconciliation")
    args = ap.parse_args()
    if args.cluster == "demo":
        return main_at_size(args)

    work = Path(tempfile.mkdtemp(prefix="pitstop-burst-"))
    server = Server(work / "server", free_port())
    took = server.start()
    print(f"local Prefect server on port {server.port} up in {took:.1f} s; {args.events} events per round, "
          f"server stopped {args.outage_s:g} s mid-burst")
    results = []
    try:
        for reconcile in (True, False)[: 1 if args.skip_baseline else 2]:
            results.append(round_(work, server, args.events, args.outage_s, reconcile, args.wait_s, args.quiet_s))
    finally:
        server.stop()
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n{os.cpu_count()} CPUs, load average {load} at the end; logs in {work}")
    print(f"{'round':16} {'sent':>5} {'stored':>7} {'runs (auto+reconciled)':>24} {'incidents':>10} "
          f"{'burst':>7} {'last incident after burst':>26}")
    for r in results:
        last = f"{r['last_incident_s']:.1f} s" if r["last_incident_s"] is not None else "-"
        runs = f"{r['automation_runs']} + {r['reconciled_runs']}"
        print(f"{r['name']:16} {r['sent']:>5} {r['stored']:>7} {runs:>24} {r['incidents']:>5} ({r['distinct']} jobs) "
              f"{r['burst_s']:>6.1f}s {last:>26}")
    return 0 if results and results[0]["distinct"] == args.events else 1


if __name__ == "__main__":
    sys.exit(main())
