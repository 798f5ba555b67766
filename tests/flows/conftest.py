"""Flow tests run the real flows on the demo cluster against the session's Prefect server.

Mail goes to a real SMTP receiver (aiosmtpd on 127.0.0.1). Policies are real YAML files: a test
that needs an RMA verdict writes a policy whose rule asks for one, exactly as an operator would.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from pitstop.cluster.demo import DemoCluster
from tests.support.net import Mailbox, smtp_receiver
from pitstop.config import load_settings
from pitstop.store import Store

DEFAULT_POLICY = Path(__file__).resolve().parents[2] / "pitstop" / "policy" / "default_policy.yaml"


@pytest.fixture
def demo(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> DemoCluster:
    monkeypatch.setenv("PITSTOP_CLUSTER", "demo")
    monkeypatch.setenv("PITSTOP_MODE", "act")
    # An escalation that reaches a rung needing a human (the RMA ticket) must not hold a test for
    # the default hour; tests about approvals set their own timeout and answer.
    monkeypatch.setenv("PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S", "2")
    return DemoCluster.create(isolated_home / "demo", nodes=8, seed=3)


def store() -> Store:
    return Store.from_settings(load_settings())


def rows(model):
    from sqlmodel import select

    with store().session() as session:
        return list(session.exec(select(model)))


def write_policy(path: Path, first_rules: list[dict] | None = None, **overrides) -> Path:
    """The built-in policy with `first_rules` tried first and top-level `overrides` applied."""
    data = yaml.safe_load(DEFAULT_POLICY.read_text())
    data["rules"] = list(first_rules or []) + data["rules"]
    data.update(overrides)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def use_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def apply(first_rules: list[dict] | None = None, **overrides) -> Path:
        path = write_policy(tmp_path / "policy.yaml", first_rules, **overrides)
        monkeypatch.setenv("PITSTOP_POLICY__FILE", str(path))
        return path

    return apply


def outbox(home: Path) -> list[dict]:
    box = home / "outbox"
    if not box.is_dir():
        return []
    return [json.loads(p.read_text()) for p in sorted(box.glob("*.json"))]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1, log: Path | None = None):
    """Poll until `predicate` is truthy; on time-out say what, plus the tail of `log` if given."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    tail = f":\n{log.read_text(errors='replace')[-4000:]}" if log is not None else ""
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{tail}")


@pytest.fixture
def mailbox(monkeypatch: pytest.MonkeyPatch) -> Mailbox:
    """A real SMTP receiver; ops notifications (and RMA tickets) are mailed to it."""
    with smtp_receiver() as box:
        monkeypatch.setenv("PITSTOP_NOTIFY__URLS", json.dumps([box.url]))
        yield box


@dataclass
class Webhook:
    url: str
    posts: list[dict] = field(default_factory=list)


@pytest.fixture
def webhook() -> Webhook:
    """A real HTTP receiver on 127.0.0.1 for apprise's json:// (the RMA ticket sink)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    hook = Webhook(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            hook.posts.append({"path": self.path, "json": json.loads(body or b"{}")})
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):  # keep pytest output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hook.url = f"json://127.0.0.1:{server.server_address[1]}/rma"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield hook
    server.shutdown()
    server.server_close()


def act_on_dev_cluster(monkeypatch: pytest.MonkeyPatch, slurm_cluster, sshd) -> None:
    """Settings for flows that act on the real dev cluster (Slurm + its sshd), in act mode."""
    monkeypatch.setenv("PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S", "3")  # an unexpected question fails fast
    monkeypatch.setenv("PITSTOP_CLUSTER", "slurm")
    # the dev cluster's RebootProgram is /bin/true: a reboot never completes, so do not wait for it
    monkeypatch.setenv("PITSTOP_PIPELINE__REBOOT_WAIT_S", "0")
    monkeypatch.setenv("PITSTOP_MODE", "act")
    monkeypatch.setenv("PITSTOP_SLURM__CONF_PATH", str(slurm_cluster.conf_path))
    monkeypatch.setenv("PITSTOP_SLURM__CLUSTER_NAME", "devcluster")
    for key, value in {"USER": sshd.user, "KEY_FILE": sshd.client_key, "KNOWN_HOSTS": sshd.known_hosts,
                       "PORT": sshd.port, "CONNECT_TIMEOUT_S": 5}.items():
        monkeypatch.setenv(f"PITSTOP_SSH__{key}", str(value))
    monkeypatch.setenv("PITSTOP_SSH__ADDRESSES", json.dumps(sshd.addresses))
