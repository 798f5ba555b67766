"""Real loopback peers for tests: a free port, an SMTP receiver, a listener that never answers.

Everything binds to 127.0.0.1 only.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from email import policy as email_policy
from email.message import EmailMessage


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Mailbox:
    """What a real aiosmtpd server on 127.0.0.1 received."""

    port: int
    messages: list[EmailMessage] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"mailto://127.0.0.1:{self.port}?from=pitstop@localhost&to=ops@localhost"

    def wait(self, count: int = 1, timeout: float = 10.0) -> list[EmailMessage]:
        deadline = time.monotonic() + timeout
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.messages

    def subjects(self) -> list[str]:
        return [str(m["subject"]) for m in self.messages]

    def body(self, index: int) -> str:
        part = self.messages[index].get_body(preferencelist=("plain", "html"))
        return part.get_content() if part is not None else ""


@contextmanager
def smtp_receiver() -> Iterator[Mailbox]:
    from aiosmtpd.controller import Controller

    box = Mailbox(port=free_port())

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            box.messages.append(message_from_bytes(envelope.content, policy=email_policy.default))
            return "250 OK"

    controller = Controller(Handler(), hostname="127.0.0.1", port=box.port)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()


@contextmanager
def silent_listener() -> Iterator[int]:
    """A TCP port that accepts connections and never says a word (a hung sshd or SMTP server)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()
