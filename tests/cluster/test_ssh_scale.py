"""SshRunner at fleet scale, on real connections to the dev cluster's sshd: known_hosts is parsed
once for many connections and again when it changes, each node name is checked against its own
line, unknown / changed / revoked keys are refused naming the fingerprints, and the pool is
bounded and expires idle connections.

Node names n00.. all reach the one sshd (ssh.addresses); each has its own known_hosts line."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import paramiko
import pytest

from pitstop.cluster import known_hosts as kh
from pitstop.cluster.base import HostStatus
from pitstop.cluster.ssh import SshRunner

pytestmark = pytest.mark.cluster


def _fleet(sshd, count: int) -> dict[str, str]:
    return {f"n{i:02d}": f"127.0.0.1:{sshd.port}" for i in range(count)}


def _host_key(sshd) -> str:
    """`ssh-ed25519 AAAA...` of the dev sshd."""
    return " ".join(sshd.host_key_pub.read_text().split()[:2])


def _lines(sshd, names) -> str:
    return "".join(f"[{n}]:{sshd.port} {_host_key(sshd)}\n" for n in names)


def _fingerprint(pub: Path) -> str:
    """What OpenSSH says the key's fingerprint is (ssh-keygen -lf): the oracle for our messages."""
    return subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True).stdout.split()[1]


def _other_key(tmp_path: Path) -> Path:
    key = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key.with_suffix(".pub")


@pytest.fixture()
def loads(monkeypatch) -> list[Path]:
    """Every parse of a known_hosts file, and a guard that paramiko's per-client load never runs."""
    calls: list[Path] = []
    real = kh.load_known_hosts

    def spy(path: Path):
        calls.append(path)
        return real(path)

    def forbidden(*_args, **_kwargs):
        raise AssertionError("paramiko's HostKeys.load ran: known_hosts parsed per connection")

    monkeypatch.setattr(kh, "load_known_hosts", spy)
    monkeypatch.setattr(paramiko.HostKeys, "load", forbidden)
    return calls


def test_known_hosts_is_parsed_once_for_many_connections(sshd, tmp_path: Path, loads) -> None:
    fleet = _fleet(sshd, 40)
    known = tmp_path / "known_hosts"
    # 400 lines as in a real fleet file: the 40 nodes here, spread among 360 others
    others = [f"other{i:03d}" for i in range(360)]
    known.write_text(_lines(sshd, others[:180]) + _lines(sshd, fleet) + _lines(sshd, others[180:]))
    with SshRunner(sshd.settings(known_hosts=known, addresses=fleet, max_concurrency=16)) as runner:
        first = runner.fan_out(list(fleet), ["true"])
        assert [r.status for r in first] == [HostStatus.OK] * 40, [r.error for r in first if r.error][:2]
        assert runner.idle_connections() == 40  # 40 nodes, 40 connections, 40 key checks
        again = runner.fan_out(list(fleet), ["true"])
        assert all(r.exit_code == 0 for r in again)
    assert loads == [known]


def test_a_changed_known_hosts_is_read_again(sshd, tmp_path: Path, loads) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(_lines(sshd, ["n00"]))
    fleet = _fleet(sshd, 2)
    # no pooling: every run is a new connection and a new key check
    with SshRunner(sshd.settings(known_hosts=known, addresses=fleet, pool_per_host=0)) as runner:
        assert runner.run("n00", ["true"]).exit_code == 0
        refused = runner.run("n01", ["true"])
        assert refused.status == HostStatus.ERROR and "is not in" in refused.error
        assert len(loads) == 1
        known.write_text(known.read_text() + _lines(sshd, ["n01"]))
        assert runner.run("n01", ["true"]).exit_code == 0
        assert len(loads) == 2
        # same size, other key: only the file's times tell the change apart
        other = " ".join(_other_key(tmp_path).read_text().split()[:2])
        known.write_text(_lines(sshd, ["n00"]) + f"[n01]:{sshd.port} {other}\n")
        changed = runner.run("n01", ["true"])
        assert changed.status == HostStatus.ERROR and "CHANGED" in changed.error
        assert runner.run("n00", ["true"]).exit_code == 0
    assert len(loads) == 3


def test_unknown_host_is_refused_and_nothing_is_added(sshd, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(_lines(sshd, ["n00"]))  # the address line of the dev cluster is not here
    sleeps: list[float] = []
    runner = SshRunner(sshd.settings(known_hosts=known, addresses=_fleet(sshd, 2)), sleep=sleeps.append)
    result = runner.run("n01", ["true"])
    assert result.status == HostStatus.ERROR and result.exit_code is None
    assert _fingerprint(sshd.host_key_pub) in result.error
    assert f"[n01]:{sshd.port} and [127.0.0.1]:{sshd.port}" in result.error  # where it looked
    assert "trust_on_first_use" in result.error and sleeps == []  # a key problem is not retried
    assert known.read_text() == _lines(sshd, ["n00"])  # never AutoAdd
    assert runner.run("n01", ["true"]).status == HostStatus.ERROR  # still refused
    runner.close()


def test_changed_key_names_both_fingerprints(sshd, tmp_path: Path) -> None:
    other = _other_key(tmp_path)
    known = tmp_path / "known_hosts"
    # the node's own line decides, even though the address line beside it matches
    known.write_text(f"[127.0.0.1]:{sshd.port} {_host_key(sshd)}\n"
                     f"[gpu01]:{sshd.port} {' '.join(other.read_text().split()[:2])}\n")
    result = SshRunner(sshd.settings(known_hosts=known)).run("gpu01", ["true"])
    assert result.status == HostStatus.ERROR and "CHANGED" in result.error
    expected, sent = _fingerprint(other), _fingerprint(sshd.host_key_pub)
    assert expected != sent and expected in result.error and sent in result.error
    assert f"line 2 of {known}" in result.error


def test_revoked_key_is_refused_even_when_listed(sshd, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(_lines(sshd, ["gpu01"]) + f"@revoked * {_host_key(sshd)}\n")
    result = SshRunner(sshd.settings(known_hosts=known)).run("gpu01", ["true"])
    assert result.status == HostStatus.ERROR and "@revoked" in result.error
    assert _fingerprint(sshd.host_key_pub) in result.error


def test_hashed_known_hosts_from_ssh_keygen_is_understood(sshd, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(_lines(sshd, ["n00", "n01"]))
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(known)], check=True, capture_output=True)
    assert "n00" not in known.read_text()  # OpenSSH hashed every name
    with SshRunner(sshd.settings(known_hosts=known, addresses=_fleet(sshd, 3))) as runner:
        results = runner.fan_out(["n00", "n01", "n02"], ["true"])
    assert [r.status for r in results] == [HostStatus.OK, HostStatus.OK, HostStatus.ERROR]


def test_trust_on_first_use_records_each_node_once_and_parses_once(sshd, tmp_path: Path, loads) -> None:
    known = tmp_path / "known_hosts"
    fleet = _fleet(sshd, 8)
    with SshRunner(sshd.settings(known_hosts=known, addresses=fleet, trust_on_first_use=True)) as runner:
        assert all(r.exit_code == 0 for r in runner.fan_out(list(fleet), ["true"]))
    lines = known.read_text().splitlines()
    assert sorted(line.split()[0] for line in lines) == [f"[{n}]:{sshd.port}" for n in fleet]
    assert len(loads) == 1  # the new lines went into the parse too, not N re-reads
    with SshRunner(sshd.settings(known_hosts=known, addresses=fleet)) as strict:
        assert all(r.exit_code == 0 for r in strict.fan_out(list(fleet), ["true"]))


def test_pool_is_bounded_in_all_and_expires_idle_connections(sshd, monkeypatch) -> None:
    connects: list[str] = []
    real = SshRunner._connect

    def counting(self, key, where):
        connects.append(key[0])
        return real(self, key, where)

    monkeypatch.setattr(SshRunner, "_connect", counting)
    fleet = _fleet(sshd, 5)
    with SshRunner(sshd.settings(addresses=fleet, pool_max_idle=3, pool_idle_s=1.0)) as runner:
        for node in fleet:
            assert runner.run(node, ["true"]).exit_code == 0
        assert runner.idle_connections() == 3  # n00 and n01, the oldest, were closed
        assert runner.run("n04", ["true"]).exit_code == 0 and connects.count("n04") == 1  # reused
        assert runner.run("n00", ["true"]).exit_code == 0 and connects.count("n00") == 2  # new
        time.sleep(1.2)
        assert runner.run("n04", ["true"]).exit_code == 0 and connects.count("n04") == 2  # expired
        assert runner.idle_connections() == 1
