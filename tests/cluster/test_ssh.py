"""SshRunner against the dev cluster's real loopback sshd, plus local listeners that misbehave.
Every address here is in 127.0.0.0/8."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

from pitstop.cluster.base import HostStatus, RemoteRunner
from pitstop.cluster.ssh import SshRunner
from tests.support.net import silent_listener

pytestmark = pytest.mark.cluster


@pytest.fixture()
def silent_port():
    """A TCP port that accepts connections and never says a word (a hung sshd / blackhole)."""
    with silent_listener() as port:
        yield port


@pytest.fixture()
def closed_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens here now: connect is refused
    return port


def test_runs_argv_literally_and_reports_exit_and_stderr(sshd) -> None:
    with sshd.runner() as runner:
        assert isinstance(runner, RemoteRunner)
        result = runner.run("gpu01", ["sh", "-c", 'echo "out:$1"; echo err >&2; exit 4', "sh", "a b; $(id)"])
        assert (result.status, result.exit_code) == (HostStatus.OK, 4)
        assert result.stdout == "out:a b; $(id)\n" and result.stderr == "err\n"
        who = runner.run("gpu02", ["id", "-un"])
        assert who.stdout.strip() == sshd.user and who.exit_code == 0
        # gpu01 and gpu02 share 127.0.0.1:port, but a connection's key was checked for one node
        # name only, so each node keeps its own; a second command on gpu01 reuses gpu01's
        assert runner.idle_connections() == 2
        assert runner.run("gpu01", ["true"]).exit_code == 0 and runner.idle_connections() == 2


def test_unknown_host_key_is_rejected(sshd, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    sleeps: list[float] = []
    runner = SshRunner(sshd.settings(known_hosts=empty), sleep=sleeps.append)
    result = runner.run("gpu01", ["true"])
    assert result.status == HostStatus.ERROR and result.exit_code is None
    assert "not in" in result.error and "trust_on_first_use" in result.error
    assert sleeps == []  # a key problem is not retried


def test_changed_host_key_is_rejected(sshd, tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    known = tmp_path / "known_hosts"
    kind, key = other.with_suffix(".pub").read_text().split()[:2]
    known.write_text(f"[127.0.0.1]:{sshd.port} {kind} {key}\n")
    result = SshRunner(sshd.settings(known_hosts=known)).run("gpu01", ["true"])
    assert result.status == HostStatus.ERROR and "CHANGED" in result.error


def test_trust_on_first_use_records_the_key(sshd, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    with SshRunner(sshd.settings(known_hosts=known, trust_on_first_use=True)) as runner:
        assert runner.run("gpu01", ["true"]).status == HostStatus.OK
    recorded = known.read_text()
    assert sshd.host_key_pub.read_text().split()[1] in recorded
    with SshRunner(sshd.settings(known_hosts=known)) as strict:  # now known: accepted strictly
        assert strict.run("gpu01", ["true"]).exit_code == 0


def test_wrong_client_key_is_refused_without_retry(sshd, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    sleeps: list[float] = []
    result = SshRunner(sshd.settings(key_file=stranger), sleep=sleeps.append).run("gpu01", ["true"])
    assert result.status == HostStatus.ERROR and "login refused" in result.error and sleeps == []


def test_refused_connect_is_retried_with_backoff(sshd, closed_port: int) -> None:
    sleeps: list[float] = []
    settings = sshd.settings(addresses={"gone": f"127.0.0.1:{closed_port}"}, connect_retries=2,
                             retry_backoff_s=0.1)
    result = SshRunner(settings, sleep=sleeps.append).run("gone", ["true"])
    assert result.status == HostStatus.ERROR and "after 3 attempts" in result.error
    assert sleeps == [0.1, 0.2]


def test_silent_host_times_out_without_stalling_the_others(sshd, silent_port: int) -> None:
    addresses = dict(sshd.addresses, blackhole=f"127.0.0.1:{silent_port}")
    settings = sshd.settings(addresses=addresses, connect_timeout_s=1.5, connect_retries=0)
    hosts = ["gpu01", "blackhole", "gpu02", "gpu03", "gpu04"]
    started = time.monotonic()
    with SshRunner(settings) as runner:
        results = runner.fan_out(hosts, ["echo", "up"])
    elapsed = time.monotonic() - started
    assert [r.host for r in results] == hosts
    assert results[1].status == HostStatus.TIMEOUT and "banner" in results[1].error
    assert all(r.status == HostStatus.OK and r.stdout == "up\n" for i, r in enumerate(results) if i != 1)
    assert max(r.duration_s for i, r in enumerate(results) if i != 1) < 1.5  # never waited for it
    assert elapsed < 5


def test_command_timeout_abandons_and_kills_the_command(sshd) -> None:
    marker = "31.41592"  # `sleep 31.41592` is easy to find in the process list
    with sshd.runner() as runner:
        started = time.monotonic()
        result = runner.run("gpu01", ["sleep", marker], timeout_s=1)
        assert result.status == HostStatus.TIMEOUT and time.monotonic() - started < 3
        assert "did not finish within 1 s" in result.error
        for _ in range(40):  # timeout -k kills it remotely within the grace period
            if subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True).returncode:
                break
            time.sleep(0.25)
        else:
            pytest.fail("the timed-out remote command is still running")
        # timeouts on several hosts run in parallel, not one after another
        started = time.monotonic()
        results = runner.fan_out(["gpu01", "gpu02", "gpu03", "gpu04"], ["sleep", "20"], timeout_s=1)
        assert {r.status for r in results} == {HostStatus.TIMEOUT}
        assert time.monotonic() - started < 4


def test_fifty_way_fan_out(sshd) -> None:
    hosts = [f"n{i:02d}" for i in range(50)]
    addresses = {h: f"127.0.0.1:{sshd.port}" for h in hosts}
    with SshRunner(sshd.settings(addresses=addresses, max_concurrency=50)) as runner:
        started = time.monotonic()
        results = runner.fan_out(hosts, ["sh", "-c", "echo $0", "x"])
        elapsed = time.monotonic() - started
    assert [r.host for r in results] == hosts
    failures = [r for r in results if r.status != HostStatus.OK]
    assert not failures, failures[:3]
    assert all(r.stdout == "x\n" for r in results)
    print(f"50-way fan-out: {elapsed:.2f} s")


def test_bad_input_is_a_per_host_error_not_an_exception(sshd) -> None:
    with sshd.runner(addresses=dict(sshd.addresses, weird="127.0.0.1:notaport")) as runner:
        results = runner.fan_out(["gpu01;rm -rf /", "weird", "gpu01"], ["true"])
        assert [r.status for r in results] == [HostStatus.ERROR, HostStatus.ERROR, HostStatus.OK]
        assert "not a valid node name" in results[0].error and "host[:port]" in results[1].error
        assert runner.run("gpu01", []).status == HostStatus.ERROR
        big = runner.run("gpu01", ["head", "-c", "3000000", "/dev/zero"])
        assert big.status == HostStatus.OK and "more bytes of output dropped" in big.stdout
        assert len(big.stdout) < 1_100_000
        assert runner.fan_out([], ["true"]) == []
