"""Session fixtures for the real dev cluster (scripts/dev-cluster): Slurm and a loopback sshd.

Other areas' tests may use them too: request `slurm_cluster` or `sshd` (add
`pytest_plugins = ["tests.cluster.conftest"]` to a conftest outside tests/cluster, or import the
helpers below). They use a running cluster (SLURM_CONF from `scripts/dev-cluster env`) and start
it when it is not running. If it cannot start, the tests FAIL with the reason; set
PITSTOP_TEST_NO_CLUSTER=1 to skip them instead (a machine without Slurm).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pitstop.cluster.slurm import SlurmScheduler
from pitstop.cluster.ssh import SshRunner
from pitstop.config import SlurmSettings, SshSettings

REPO_ROOT = Path(__file__).resolve().parents[2]
DEV_CLUSTER = REPO_ROOT / "scripts" / "dev-cluster"
START_TIMEOUT_S = 600  # a fresh machine installs Debian packages first


@dataclass(frozen=True)
class SlurmCluster:
    """The running dev cluster. `env` is what Slurm's tools need (SLURM_CONF...)."""

    dir: Path
    conf_path: Path
    nodes: list[str]
    env: dict[str, str]

    @property
    def jobs_dir(self) -> Path:
        return self.dir / "jobs"

    def hook_dir(self, hook: str) -> Path:
        """Drop-in directory run by a Slurm hook: prolog_ctld, epilog_ctld, prolog, epilog."""
        return self.dir / "hooks" / f"{hook}.d"

    def scheduler(self, **settings) -> SlurmScheduler:
        return SlurmScheduler(SlurmSettings(conf_path=self.conf_path, **settings), env=self.env)

    def slurm(self, *argv: str, input_text: str | None = None, check: bool = True) -> str:
        """Run a Slurm tool directly (for set-up and for checking the adapter independently)."""
        proc = subprocess.run(
            list(argv), input=input_text, capture_output=True, text=True, env=self.env, timeout=60
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{argv} failed ({proc.returncode}): {proc.stderr or proc.stdout}")
        return proc.stdout

    def submit(self, *sbatch_args: str, script: str | None = None) -> str:
        """sbatch --parsable; `script` goes on stdin, else pass --wrap in sbatch_args."""
        out = self.slurm(
            "sbatch", "--parsable", f"--chdir={self.jobs_dir}", *sbatch_args, input_text=script
        )
        return out.strip().split(";")[0]

    def wait_state(self, job_id: str, *states: str, timeout_s: float = 60) -> str:
        """Poll `scontrol show job` (not the adapter) until the job is in one of `states`."""
        deadline = time.monotonic() + timeout_s
        state = "?"
        while time.monotonic() < deadline:
            out = self.slurm("scontrol", "-o", "show", "job", job_id, check=False)
            for item in out.split():
                if item.startswith("JobState="):
                    state = item.split("=", 1)[1]
            if state in states:
                return state
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} still {state} after {timeout_s} s, wanted {states}")

    def cancel(self, *job_ids: str) -> None:
        if job_ids:
            self.slurm("scancel", *job_ids, check=False)


@dataclass(frozen=True)
class Sshd:
    """The dev cluster's sshd on 127.0.0.1, its keys, and node name -> address map."""

    host: str
    port: int
    user: str
    client_key: Path
    known_hosts: Path
    host_key_pub: Path
    addresses: dict[str, str] = field(default_factory=dict)

    def settings(self, **overrides) -> SshSettings:
        values = dict(
            user=self.user,
            key_file=self.client_key,
            known_hosts=self.known_hosts,
            port=self.port,
            addresses=dict(self.addresses),
            connect_timeout_s=5.0,
            command_timeout_s=30.0,
        )
        values.update(overrides)
        return SshSettings(**values)

    def runner(self, **overrides) -> SshRunner:
        return SshRunner(self.settings(**overrides))


def _dev_cluster(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(DEV_CLUSTER), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _parse_env(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        parts = shlex.split(line)
        if len(parts) == 2 and parts[0] == "export" and "=" in parts[1]:
            key, value = parts[1].split("=", 1)
            values[key] = value
    return values


@pytest.fixture(scope="session")
def dev_cluster_env() -> dict[str, str]:
    """`scripts/dev-cluster env` of a healthy cluster, starting it if needed."""
    if os.environ.get("PITSTOP_TEST_NO_CLUSTER") == "1":
        pytest.skip("PITSTOP_TEST_NO_CLUSTER=1: dev cluster tests skipped")
    status = _dev_cluster("status", timeout=60)
    if status.returncode != 0:
        started = _dev_cluster("start", timeout=START_TIMEOUT_S)
        if started.returncode != 0:
            pytest.fail(
                "the dev cluster did not start (scripts/dev-cluster start exited "
                f"{started.returncode}); set PITSTOP_TEST_NO_CLUSTER=1 to skip cluster tests.\n"
                f"{started.stderr[-3000:]}",
                pytrace=False,
            )
    env = _parse_env(_dev_cluster("env", timeout=30).stdout)
    if "SLURM_CONF" not in env:
        pytest.fail("scripts/dev-cluster env printed no SLURM_CONF", pytrace=False)
    return env


@pytest.fixture(scope="session")
def slurm_cluster(dev_cluster_env: dict[str, str]) -> SlurmCluster:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITSTOP_")}
    env["SLURM_CONF"] = dev_cluster_env["SLURM_CONF"]
    conf = Path(env["SLURM_CONF"])
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, env=env, timeout=30
    ).stdout
    nodes = sorted(set(out.split()))
    if not nodes:
        pytest.fail(f"sinfo shows no nodes on the dev cluster ({conf})", pytrace=False)
    return SlurmCluster(dir=conf.parent.parent, conf_path=conf, nodes=nodes, env=env)


@pytest.fixture(scope="session")
def sshd(dev_cluster_env: dict[str, str]) -> Sshd:
    import json

    key = Path(dev_cluster_env["PITSTOP_SSH__KEY_FILE"])
    return Sshd(
        host="127.0.0.1",
        port=int(dev_cluster_env["PITSTOP_SSH__PORT"]),
        user=dev_cluster_env["PITSTOP_SSH__USER"],
        client_key=key,
        known_hosts=Path(dev_cluster_env["PITSTOP_SSH__KNOWN_HOSTS"]),
        host_key_pub=key.parent / "ssh_host_ed25519_key.pub",
        addresses=json.loads(dev_cluster_env.get("PITSTOP_SSH__ADDRESSES", "{}")),
    )


@pytest.fixture(scope="session")
def timelimit_job(slurm_cluster: SlurmCluster) -> str:
    """A job with a 1-minute limit, submitted early; test_z_timelimit checks it at the end."""
    return slurm_cluster.submit(
        "-J", "pitstop-test-timelimit", "--time=1", "-o", "timelimit-%j.out",
        "--wrap", "echo started; sleep 300",
    )
