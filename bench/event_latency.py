"""Latency from a job's end to the operator's notification, through the real pipeline.

    .venv/bin/python bench/event_latency.py [--jobs 20] [--api-url URL] [--mode observe|act]

What runs (all real processes on 127.0.0.1): a local Prefect server (SQLite) unless --api-url
is given, `pitstop up` serving the deployments, an aiosmtpd SMTP receiver the notifications
are mailed to, and the demo cluster with one injected fault per job. For each job the clock
starts just before `pitstop epilog` is spawned (what Slurm does at job end) and stops when the
mail about that job arrives. Jobs run one after another; the first is a warm-up, not counted.
No DCGM on this path. Prints p50/p99 and where the time goes (from the flow run's timestamps).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
PITSTOP = REPO / ".venv" / "bin" / "pitstop"

from pitstop.processes import stop_process_group  # noqa: E402  (after the path set-up)
# faults that leave the culprit node able to take more demo jobs, so a long run does not run dry
FAULT_MIX = ["software_bug", "cuda_oom", "nccl_watchdog", "gpu_fell_off_bus", "hbm3_double_bit_error"]
SUBJECT_JOB = re.compile(r"\bjob (\S+?):")


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


class Mailbox:
    """aiosmtpd receiver: job id -> wall time the first mail about it arrived."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.port = free_port()
        self.arrived: dict[str, float] = {}
        self.lock = threading.Lock()
        box = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                from email import message_from_bytes, policy

                msg = message_from_bytes(envelope.content, policy=policy.default)
                m = SUBJECT_JOB.search(str(msg["subject"]))
                if m:
                    with box.lock:
                        box.arrived.setdefault(m.group(1), time.time())
                return "250 OK"

        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()

    @property
    def url(self) -> str:
        return f"mailto://127.0.0.1:{self.port}?from=pitstop@localhost&to=ops@localhost"

    def wait(self, job_id: str, timeout_s: float) -> float | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if job_id in self.arrived:
                    return self.arrived[job_id]
            time.sleep(0.02)
        return None


def iso_to_epoch(text: str | None) -> float | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * pct / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=20, help="measured jobs (plus one warm-up)")
    ap.add_argument("--api-url", help="use this Prefect API instead of starting a local server")
    ap.add_argument("--mode", default="observe", choices=["observe", "act"])
    ap.add_argument("--timeout", type=float, default=120.0, help="per job, seconds")
    args = ap.parse_args()

    from deployments.local_server import start_local_server
    from pitstop.cluster.demo import DemoCluster

    work = Path(tempfile.mkdtemp(prefix="pitstop-bench-"))
    home = work / "home"
    mailbox = Mailbox()
    server = None
    if args.api_url:
        api_url = args.api_url.rstrip("/")
    else:
        t = time.monotonic()
        server = start_local_server(home, free_port())
        api_url = server.api_url
        print(f"local Prefect server {api_url} up in {time.monotonic() - t:.1f} s")
    env = {
        **os.environ,
        "PITSTOP_HOME": str(home), "PITSTOP_CLUSTER": "demo", "PITSTOP_MODE": args.mode,
        "PREFECT_API_URL": api_url, "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PITSTOP_NOTIFY__URLS": json.dumps([mailbox.url]),
        "PITSTOP_TRIGGERS__HEALTH_SWEEP_CRON": "0 0 1 1 *",
        "PITSTOP_TRIGGERS__RUNNER_POLL_S": "1",
    }
    demo = DemoCluster.create(home / "demo", nodes=max(8, 2 * (args.jobs + 2)), seed=11)
    up_log = work / "pitstop-up.log"
    with up_log.open("wb") as log:
        up = subprocess.Popen([str(PITSTOP), "up"], env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        deployment = None
        deadline = time.monotonic() + 120
        while deployment is None and time.monotonic() < deadline and up.poll() is None:
            found = rest(api_url, "/deployments/filter", {"deployments": {"name": {"any_": ["post-failure"]}}})
            deployment = found[0] if found else None
            time.sleep(0.5)
        if deployment is None:
            print(f"pitstop up did not register deployments; see {up_log}", file=sys.stderr)
            return 1
        time.sleep(2)  # the automation is created right after the deployment

        totals, epilogs, to_created, to_running, to_mail = [], [], [], [], []
        for index in range(args.jobs + 1):
            [fault] = demo.inject_faults(1, kinds=[FAULT_MIX[index % len(FAULT_MIX)]])
            job = demo.job(fault.job_id)
            code = f"{job.exit_code or 1}:{job.signal or 0}"
            hook_env = {"PITSTOP_HOME": str(home), "PREFECT_API_URL": api_url,
                        "SLURM_JOB_ID": job.job_id, "SLURM_CLUSTER_NAME": "demo",
                        "SLURM_JOB_EXIT_CODE2": code, "SLURM_JOB_NODELIST": ",".join(job.nodes),
                        "SLURM_JOB_USER": job.user or "alice", "SLURM_JOB_PARTITION": "gpu"}
            t0 = time.time()
            subprocess.run([str(PITSTOP), "epilog"], env=hook_env, timeout=30, check=True)
            t_epilog = time.time()
            arrived = mailbox.wait(job.job_id, args.timeout)
            if arrived is None:
                print(f"job {job.job_id} ({fault.fault}): no mail within {args.timeout:.0f} s; see {up_log}")
                continue
            runs = rest(api_url, "/flow_runs/filter", {"deployments": {"id": {"any_": [deployment["id"]]}},
                                                        "limit": 200})
            run = next((r for r in runs if str(r["parameters"].get("job_id")) == job.job_id), None)
            label = "warm-up" if index == 0 else f"{index:3d}"
            line = f"{label} job {job.job_id:>5} {fault.fault:24} end->mail {arrived - t0:6.2f} s"
            if run is not None:
                created, started = iso_to_epoch(run["created"]), iso_to_epoch(run.get("start_time"))
                line += f"  (epilog {t_epilog - t0:.2f}, ->run created {created - t0:.2f}"
                if started:
                    line += f", ->running {started - t0:.2f}"
                line += ")"
            print(line, flush=True)
            if index == 0:
                continue
            totals.append(arrived - t0)
            epilogs.append(t_epilog - t0)
            if run is not None:
                to_created.append(iso_to_epoch(run["created"]) - t0)
                if run.get("start_time"):
                    to_running.append(iso_to_epoch(run["start_time"]) - t0)
                    to_mail.append(arrived - iso_to_epoch(run["start_time"]))
        if not totals:
            print("no measurements", file=sys.stderr)
            return 1
        fast = up_log.read_text(errors="replace").count("fast lane: started flow run")
        load = "/".join(f"{x:.1f}" for x in os.getloadavg())
        print()
        print(f"jobs measured: {len(totals)} (mode {args.mode}, demo cluster, no DCGM; "
              f"{os.cpu_count()} CPUs, load average {load} at the end)")
        print(f"runs started in-process by the fast lane: {fast} of {len(totals) + 1} "
              "(the rest by Prefect's runner, in a spawned interpreter)")
        print(f"job end -> notification received: p50 {statistics.median(totals):.2f} s, "
              f"p99 {percentile(totals, 99):.2f} s, max {max(totals):.2f} s")
        for name, values in [("epilog (spool+deliver)", epilogs), ("job end -> flow run created", to_created),
                             ("job end -> flow run running", to_running),
                             ("flow running -> mail received", to_mail)]:
            if values:
                print(f"  {name:32} p50 {statistics.median(values):.2f} s  p99 {percentile(values, 99):.2f} s")
        print(f"left for inspection: {work} (pitstop-up.log, home/pitstop.db, home/outbox)")
        return 0
    finally:
        stop_process_group(up, grace_s=30)
        if server is not None:
            server.stop()
        mailbox.controller.stop()


if __name__ == "__main__":
    sys.exit(main())
