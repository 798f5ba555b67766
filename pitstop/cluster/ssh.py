"""`RemoteRunner` over SSH (paramiko): pooled connections, timeouts, bounded fan-out.

- Host keys are checked against known_hosts; an unknown key is rejected unless the operator set
  `ssh.trust_on_first_use`, which records the key it first sees (and rejects a changed key later).
- Connect errors are retried with exponential backoff. A command is never re-run: once it may
  have started, its failure is reported, not retried.
- A command that outlives its timeout is abandoned (channel and connection closed) and, because
  it was started under `timeout(1)` on the remote side, killed there too.
- `fan_out` never raises for a host: every host gets a HostResult (ok / error / timeout), in
  input order, and a host that hangs costs only its own timeouts.

"ok" means the command ran to completion; its exit status is in `exit_code` (may be non-zero).
"""

from __future__ import annotations

import shlex
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from pitstop.cluster.base import HostResult, HostStatus, InvalidIdentifier, for_node, validate_node_name
from pitstop.config import SshSettings

if TYPE_CHECKING:  # paramiko costs ~100 ms to import; only pay it when SSH is used
    import paramiko

# seconds the remote side waits past our timeout before killing the command (timeout -k)
_REMOTE_GRACE_S = 2


class SshError(RuntimeError):
    """A host could not be reached or would not let us in; the message says which and why."""


class UnknownHostKey(SshError):
    """The host's key is not in known_hosts and trust-on-first-use is off."""


class _ConnectError(SshError):
    """A failure before any command ran: safe to retry."""


class SshRunner:
    """Runs argv lists on nodes over SSH. Use as a context manager or call `close()`."""

    def __init__(self, settings: SshSettings | None = None, sleep: Callable[[float], None] = time.sleep):
        self.settings = settings or SshSettings()
        self._sleep = sleep
        self._pool: dict[tuple[str, int, str], list[paramiko.SSHClient]] = {}
        self._lock = threading.Lock()
        self._known_hosts_lock = threading.Lock()

    # ------------------------------------------------------------------------------ public

    def run(self, host: str, argv: list[str], timeout_s: float | None = None) -> HostResult:
        started = time.monotonic()
        timeout = timeout_s if timeout_s is not None else self.settings.command_timeout_s

        def result(status: HostStatus, **fields) -> HostResult:
            return HostResult(host=str(host), status=status, duration_s=time.monotonic() - started, **fields)

        try:
            address, port = self.address_of(host)  # validates host before it reaches the argv
            command = self._command(for_node(argv, host), timeout)
        except (InvalidIdentifier, ValueError) as exc:
            return result(HostStatus.ERROR, error=str(exc))
        where = f"{host} ({address}:{port})" if address != host or port != 22 else host
        try:
            client = self._checkout(address, port, where)
        except SshError as exc:
            status = HostStatus.TIMEOUT if isinstance(exc, _ConnectTimeout) else HostStatus.ERROR
            return result(status, error=str(exc))
        key = (address, port, self._user())
        try:
            code, out, err, timed_out = self._exec(client, command, timeout)
        except Exception as exc:  # noqa: BLE001 - the session broke mid-command; report, never re-run
            _close_quietly(client)
            return result(HostStatus.ERROR, error=f"{where}: SSH session failed during the command: {exc}")
        if timed_out:
            _close_quietly(client)  # the channel may still be busy; never reuse it
            return result(
                HostStatus.TIMEOUT,
                stdout=out,
                stderr=err,
                error=f"{where}: command did not finish within {timeout:g} s; abandoned and killed",
            )
        self._checkin(key, client)
        return result(HostStatus.OK, exit_code=code, stdout=out, stderr=err)

    def fan_out(self, hosts: list[str], argv: list[str], timeout_s: float | None = None) -> list[HostResult]:
        if not hosts:
            return []
        workers = min(self.settings.max_concurrency, len(hosts))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pitstop-ssh") as pool:
            futures = [pool.submit(self._run_safely, host, argv, timeout_s) for host in hosts]
            return [f.result() for f in futures]

    def address_of(self, host: str) -> tuple[str, int]:
        """Logical node name -> (address, port), from `ssh.addresses` or the name itself."""
        validate_node_name(host)
        mapped = self.settings.addresses.get(host, host)
        address, sep, port_text = mapped.rpartition(":")
        if not sep:
            address, port = mapped, self.settings.port
        elif port_text.isdigit() and 0 < int(port_text) < 65536:
            port = int(port_text)
        else:
            raise ValueError(f"ssh.addresses[{host!r}] = {mapped!r} is not host[:port]")
        validate_node_name(address)
        return address, port

    def idle_connections(self) -> int:
        """Open connections waiting in the pool for reuse."""
        with self._lock:
            return sum(len(idle) for idle in self._pool.values())

    def close(self) -> None:
        with self._lock:
            clients = [c for idle in self._pool.values() for c in idle]
            self._pool.clear()
        for client in clients:
            _close_quietly(client)

    def __enter__(self) -> SshRunner:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # ------------------------------------------------------------------------------ internals

    def _run_safely(self, host: str, argv: list[str], timeout_s: float | None) -> HostResult:
        try:
            return self.run(host, argv, timeout_s)
        except Exception as exc:  # noqa: BLE001 - one host's surprise must not sink the fan-out
            return HostResult(host=str(host), status=HostStatus.ERROR, error=f"{host}: unexpected error: {exc!r}")

    def _user(self) -> str:
        import getpass

        return self.settings.user or getpass.getuser()

    def _command(self, argv: list[str], timeout: float) -> str:
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError(f"argv must be a non-empty list of strings, got {argv!r}")
        if any("\x00" in a for a in argv):
            raise ValueError("argv items must not contain NUL bytes")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        # the remote shell sees one string: quote every item, so nothing in argv is interpreted
        if self.settings.remote_timeout:
            limit = max(1, int(timeout + 0.999)) + _REMOTE_GRACE_S
            return shlex.join(["timeout", "-k", str(_REMOTE_GRACE_S), str(limit), *argv])
        return shlex.join(argv)

    def _checkout(self, address: str, port: int, where: str) -> paramiko.SSHClient:
        key = (address, port, self._user())
        with self._lock:
            idle = self._pool.get(key, [])
            while idle:
                client = idle.pop()
                transport = client.get_transport()
                if transport is not None and transport.is_active():
                    return client
                _close_quietly(client)
        attempts = self.settings.connect_retries + 1
        delay = self.settings.retry_backoff_s
        for attempt in range(1, attempts + 1):
            try:
                return self._connect(address, port, where)
            except _ConnectError as exc:
                if attempt == attempts:
                    raise type(exc)(f"{exc} (after {attempts} attempts)") from exc
                self._sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def _checkin(self, key: tuple[str, int, str], client: paramiko.SSHClient) -> None:
        with self._lock:
            idle = self._pool.setdefault(key, [])
            if len(idle) < self.settings.pool_per_host:
                idle.append(client)
                return
        _close_quietly(client)

    def _connect(self, address: str, port: int, where: str) -> paramiko.SSHClient:
        import paramiko

        client = paramiko.SSHClient()
        known_hosts = self._known_hosts_path()
        if known_hosts is not None and known_hosts.is_file():
            try:
                client.load_host_keys(str(known_hosts))
            except (OSError, paramiko.SSHException, ValueError) as exc:
                raise SshError(f"cannot read known_hosts {known_hosts}: {exc}") from exc
        if self.settings.trust_on_first_use:
            client.set_missing_host_key_policy(_TrustOnFirstUse(known_hosts, self._known_hosts_lock))
        else:
            client.set_missing_host_key_policy(_Reject(known_hosts))
        timeout = self.settings.connect_timeout_s
        key_file = self.settings.key_file
        started = time.monotonic()
        try:
            client.connect(
                hostname=address,
                port=port,
                username=self._user(),
                key_filename=str(key_file) if key_file else None,
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
                channel_timeout=timeout,
                allow_agent=False,
                look_for_keys=key_file is None,
            )
            return client
        except UnknownHostKey:
            _close_quietly(client)
            raise
        except paramiko.BadHostKeyException as exc:
            _close_quietly(client)
            raise SshError(
                f"{where}: host key CHANGED (expected {exc.expected_key.get_base64()[:16]}..., got "
                f"{exc.key.get_base64()[:16]}...): node reinstalled or someone in the middle; "
                f"check it, then fix {known_hosts}"
            ) from exc
        except paramiko.AuthenticationException as exc:
            _close_quietly(client)
            raise SshError(
                f"{where}: login refused for user {self._user()!r} with key {key_file or '(default keys)'}: {exc}"
            ) from exc
        except (TimeoutError, socket.timeout) as exc:
            _close_quietly(client)
            raise _ConnectTimeout(f"{where}: no answer within {timeout:g} s (connect)") from exc
        except paramiko.SSHException as exc:
            transport = client.get_transport()
            saved = getattr(transport, "saved_exception", None) if transport else None
            _close_quietly(client)
            # TCP accepted but no SSH banner (a hung or overloaded sshd): paramiko logs the banner
            # error and then raises a vaguer "No existing session"; the clock tells them apart
            hung = time.monotonic() - started >= timeout * 0.9
            if hung or "banner" in f"{exc} {saved}".lower():
                raise _ConnectTimeout(f"{where}: no SSH banner within {timeout:g} s ({exc})") from exc
            raise _ConnectError(f"{where}: SSH handshake failed: {exc}") from exc
        except (OSError, EOFError) as exc:  # refused, unreachable, reset (NoValidConnectionsError)
            _close_quietly(client)
            raise _ConnectError(f"{where}: cannot connect: {exc}") from exc

    def _known_hosts_path(self) -> Path | None:
        if self.settings.known_hosts is not None:
            return Path(self.settings.known_hosts).expanduser()
        default = Path("~/.ssh/known_hosts").expanduser()
        return default

    def _exec(self, client: paramiko.SSHClient, command: str, timeout: float) -> tuple[int | None, str, str, bool]:
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            raise SshError("connection lost before the command started")
        channel = transport.open_session(timeout=self.settings.connect_timeout_s)
        limit = self.settings.max_output_bytes
        out, err = _Capped(limit), _Capped(limit)
        deadline = time.monotonic() + timeout
        try:
            channel.settimeout(0.2)
            channel.exec_command(command)
            channel.shutdown_write()  # the command gets EOF on stdin, never waits for input
            while True:
                while channel.recv_ready():
                    out.add(channel.recv(65536))
                while channel.recv_stderr_ready():
                    err.add(channel.recv_stderr(65536))
                if channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready():
                    break
                if time.monotonic() >= deadline:
                    return (None, out.text(), err.text(), True)
                try:  # wait for data with a short timeout, so the deadline is honoured
                    chunk = channel.recv(65536)
                    if chunk:
                        out.add(chunk)
                    elif channel.exit_status_ready():
                        pass
                    else:
                        time.sleep(0.01)
                except socket.timeout:
                    pass
            # drain what arrived with the exit status
            while channel.recv_ready():
                out.add(channel.recv(65536))
            while channel.recv_stderr_ready():
                err.add(channel.recv_stderr(65536))
            return (channel.recv_exit_status(), out.text(), err.text(), False)
        finally:
            channel.close()


class _ConnectTimeout(_ConnectError):
    """No answer while connecting: reported as a timeout."""


class _Capped:
    """Collects output up to a byte limit, then notes how much was dropped."""

    def __init__(self, limit: int):
        self.limit, self.parts, self.size, self.dropped = limit, [], 0, 0

    def add(self, data: bytes) -> None:
        room = self.limit - self.size
        if room > 0:
            self.parts.append(data[:room])
            self.size += min(room, len(data))
        self.dropped += max(0, len(data) - max(room, 0))

    def text(self) -> str:
        text = b"".join(self.parts).decode("utf-8", errors="replace")
        if self.dropped:
            text += f"\n[pitstop: {self.dropped} more bytes of output dropped]"
        return text


class _Reject:
    """Refuse hosts whose key is not in known_hosts, saying how to fix it."""

    def __init__(self, known_hosts: Path | None):
        self.known_hosts = known_hosts

    def missing_host_key(self, client, hostname, key) -> None:
        where = self.known_hosts or "(no known_hosts file)"
        raise UnknownHostKey(
            f"{hostname}: host key ({key.get_name()} {key.get_fingerprint().hex()}) is not in "
            f"{where}; add it after checking it (ssh-keyscan), or set ssh.trust_on_first_use=true"
        )


class _TrustOnFirstUse:
    """Accept and record a host's first key; a later different key still fails (BadHostKey)."""

    def __init__(self, known_hosts: Path | None, lock: threading.Lock):
        self.known_hosts, self.lock = known_hosts, lock

    def missing_host_key(self, client, hostname, key) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        if self.known_hosts is None:
            return
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with self.lock:
            self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
            with self.known_hosts.open("a", encoding="utf-8") as handle:
                handle.write(line)


def _close_quietly(client) -> None:
    try:
        client.close()
    except Exception:  # noqa: BLE001 - closing a broken connection may itself fail
        pass
