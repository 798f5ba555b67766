"""An RMA send interrupted for real: the ticket desk receives the request, and the flow's process
is killed (SIGKILL) before it can journal the answer. The re-run sends the same ticket again
with the same key and is marked as a resend, and the desk, which keys tickets on the
Idempotency-Key header (as ticket intake APIs key on an external id), still has one ticket. The
store has one ticket row, now `sent`, and the action is journaled done."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pitstop.store.tables import ActionRecord, Incident, Ticket
from tasks.tickets import ticket_key, with_idempotency_key
from tests.flows.conftest import rows

pytestmark = [pytest.mark.prefect]

REPO = Path(__file__).resolve().parents[2]
RMA_NOW = {  # test rule: Xid 79 goes straight to the vendor, without asking (approval_required below)
    "cause": "gpu_hardware",
    "signature": "xid-79",
    "description": "test: Xid 79 goes straight to the vendor",
    "actions": ["drain", "rma_ticket", "notify_ops"],
}
RUN_FLOW = "import sys\nfrom flows.post_failure import post_failure\npost_failure(sys.argv[1])\n"


@dataclass
class TicketDesk:
    """A vendor's ticket intake on 127.0.0.1: one ticket per Idempotency-Key. With `kill` set,
    the first request kills that process before the desk answers it."""

    url: str = ""
    posts: list[dict] = field(default_factory=list)
    tickets: dict[str, dict] = field(default_factory=dict)
    kill: subprocess.Popen | None = None
    killed: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def desk():
    found = TicketDesk()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            key = self.headers.get("Idempotency-Key")
            found.posts.append({"key": key, "json": body})
            found.tickets.setdefault(key, body)
            if found.kill is not None and not found.killed.is_set():
                os.kill(found.kill.pid, signal.SIGKILL)  # received, and the sender dies unanswered
                found.kill.wait(30)
                found.killed.set()
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    found.url = f"json://127.0.0.1:{server.server_address[1]}/rma"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield found
    server.shutdown()
    server.server_close()


def test_ticket_key_is_stable_and_goes_in_a_header_only_where_apprise_sends_headers() -> None:
    key = ticket_key("job:devcluster:42:2025-03-01T11:58:07+00:00", "gpu01")
    assert key == ticket_key("job:devcluster:42:2025-03-01T11:58:07+00:00", "gpu01")
    assert key != ticket_key("job:devcluster:42:2025-03-01T11:58:07+00:00", "gpu02")
    assert key != ticket_key("job:devcluster:43:2025-03-01T11:58:07+00:00", "gpu01")
    assert with_idempotency_key("json://desk/rma", key) == f"json://desk/rma?+Idempotency-Key={key}"
    assert with_idempotency_key("jsons://desk/rma?x=1", key) == f"jsons://desk/rma?x=1&+Idempotency-Key={key}"
    assert with_idempotency_key("mailto://ops@example.org", key) == "mailto://ops@example.org"


def _stderr(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.kill()
        proc.wait(30)
    return proc.stderr.read().decode(errors="replace")[-3000:]


@pytest.mark.slow
def test_send_killed_after_the_desk_got_it_is_one_ticket_after_the_rerun(
    prefect_server, demo, use_policy, desk, monkeypatch
) -> None:
    from flows.post_failure import post_failure

    use_policy([RMA_NOW], approval_required=["reboot"])
    monkeypatch.setenv("PITSTOP_PIPELINE__TICKET_URLS", json.dumps([desk.url]))
    [fault] = demo.inject_faults(1, kinds=["gpu_fell_off_bus"])

    first = subprocess.Popen([sys.executable, "-c", RUN_FLOW, fault.job_id], cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    desk.kill = first
    try:
        if not desk.killed.wait(180):
            raise AssertionError("the flow never sent its ticket: " + _stderr(first))
    finally:
        if first.poll() is None:
            first.kill()
        first.wait(30)
    assert first.returncode == -signal.SIGKILL and len(desk.posts) == 1, _stderr(first)
    # what the killed run left: the ticket journaled as being sent, the action in doubt
    [ticket] = rows(Ticket)
    acts = {a.kind: a for a in rows(ActionRecord)}
    assert (ticket.status, ticket.sink_result) == ("sending", None)
    assert acts["rma_ticket"].state == "running" and acts["drain"].state == "done"

    report = post_failure(fault.job_id)

    assert report.status == "done", report
    assert len(desk.posts) == 2, desk.posts
    keys = {p["key"] for p in desk.posts}
    [incident] = rows(Incident)
    assert keys == {ticket_key(incident.idem_key, fault.nodes[0])}
    assert len(desk.tickets) == 1  # one ticket at the desk
    records = [json.loads(p["json"]["message"].split("Ticket record (JSON):", 1)[1]) for p in desk.posts]
    assert [r["resend"] for r in records] == [False, True]
    assert {r["ticket_id"] for r in records} == {ticket.id}
    assert all(p["json"]["title"].endswith(f"[{keys.pop()}]") for p in desk.posts[:1])
    [after] = rows(Ticket)  # and one in the store
    assert after.id == ticket.id and after.status == "sent"
    acts = {a.kind: a for a in rows(ActionRecord)}
    assert acts["rma_ticket"].state == "done"
    assert "sent again after an interrupted send" in acts["rma_ticket"].result
