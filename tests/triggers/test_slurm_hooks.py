"""`pitstop epilog` installed as the real dev cluster's EpilogSlurmctld (scripts/dev-cluster runs
every program in $DIR/hooks/epilog_ctld.d/). A failed sbatch job -> event spooled while Prefect
is down -> delivered by `pitstop spool flush`; with Prefect up -> delivered by the hook itself.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from pitstop.events.deliver import PrefectEventsClient
from pitstop.events.models import JOB_ENDED
from tests.cluster.conftest import dev_cluster_env, slurm_cluster  # noqa: F401  (fixtures)
from tests.conftest import REPO_ROOT
from tests.triggers.conftest import PITSTOP_BIN, closed_port_url

MAKE_WRAPPER = REPO_ROOT / "scripts" / "slurm-hooks" / "make-wrapper"
pytestmark = [pytest.mark.cluster, pytest.mark.prefect, pytest.mark.slow]


def install(hook_path: Path, home: Path, api_url: str, slurm_conf: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "PITSTOP_HOME": str(home), "PREFECT_API_URL": api_url,
           "SLURM_CONF": str(slurm_conf)}
    subprocess.run([str(MAKE_WRAPPER), "epilog", str(hook_path)], env=env, check=True,
                   capture_output=True, timeout=30)


def events_for(spool_dir: Path, job_id: str, where: str) -> list[dict]:
    files = (spool_dir / where).glob("*.json") if (spool_dir / where).is_dir() else []
    found = [json.loads(p.read_text()) for p in files]
    return [e for e in found if e["payload"]["job_id"] == job_id]


def wait_until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def test_failed_sbatch_job_reaches_prefect_through_the_epilog(
    slurm_cluster, warm_prefect, tmp_path: Path  # noqa: F811
) -> None:
    home = tmp_path / "hook-home"  # slurmctld runs the hook as root: a path it can write
    hook = slurm_cluster.hook_dir("epilog_ctld") / f"50-pitstop-test-{uuid.uuid4().hex[:8]}"
    spool_dir = home / "spool"
    try:
        # 1. Prefect down while the job ends: the event is spooled, the job unaffected
        install(hook, home, closed_port_url(), slurm_cluster.conf_path)
        down_job = slurm_cluster.submit("-o", "pitstop-trig-%j.out", "--wrap", "echo boom; exit 3")
        assert slurm_cluster.wait_state(down_job, "FAILED", timeout_s=60) == "FAILED"
        [spooled] = wait_until(lambda: events_for(spool_dir, down_job, "pending"), 30,
                               f"job {down_job}'s event in the spool")
        assert spooled["payload"]["exit_code"] == 3 and spooled["payload"]["hook"] == "EpilogSlurmctld"
        assert spooled["payload"]["cluster"] and spooled["payload"]["nodes"]

        # ... and delivered later, once
        flush_env = {"PATH": "/usr/bin:/bin", "PITSTOP_HOME": str(home),
                     "PREFECT_API_URL": warm_prefect.api_url}
        out = subprocess.run([str(PITSTOP_BIN), "spool", "flush"], env=flush_env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        assert events_for(spool_dir, down_job, "pending") == []

        # 2. Prefect up: the hook delivers it itself
        install(hook, home, warm_prefect.api_url, slurm_cluster.conf_path)
        up_job = slurm_cluster.submit("-o", "pitstop-trig-%j.out", "--wrap", "exit 7")
        assert slurm_cluster.wait_state(up_job, "FAILED", timeout_s=60) == "FAILED"
        [sent] = wait_until(lambda: events_for(spool_dir, up_job, "sent"), 30,
                            f"job {up_job}'s event delivered by the hook")
        assert sent["payload"]["exit_code"] == 7

        client = PrefectEventsClient(warm_prefect.api_url, timeout_s=5)
        ids = [spooled["id"], sent["id"]]
        seen = wait_until(
            lambda: (r := client.query([JOB_ENDED], "2000-01-01T00:00:00+00:00", ids=ids)) and len(r) == 2 and r,
            30, "both events in Prefect",
        )
        assert {e["payload"]["job_id"] for e in seen} == {down_job, up_job}
        log = (home / "log" / "hooks.log").read_text()
        assert f"job={up_job} state=FAILED exit=7" in log
    finally:
        hook.unlink(missing_ok=True)
