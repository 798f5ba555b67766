"""`RemoteRunner` over SSH (paramiko): pooled connections, timeouts, bounded fan-out.

- Host keys are checked against known_hosts, parsed once per process and again only when the
  file changes (pitstop/cluster/known_hosts.py), never once per connection. A node's key is looked up
  under its node name and under the address it is reached at (`[gpu01]:2222`, then
  `[10.0.0.5]:2222`, as OpenSSH files them; the first one with keys decides). An unknown key is
  rejected unless the operator set `ssh.trust_on_first_use`, which records the key it first sees
  under the node name (and rejects a changed key later). A changed or `@revoked` key is always
  rejected, naming the SHA256 fingerprints.
- A pooled connection belongs to one node, even when several node names share an address (a dev
  cluster): its key was checked for that name only. The pool is bounded per node and in all, and
  closes connections idle longer than `ssh.pool_idle_s`.
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
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from pitstop.cluster.base import HostResult, HostStatus, InvalidIdentifier, for_node, validate_node_name
from pitstop.cluster.known_hosts import HostKey, KnownHosts, KnownHostsFile, blob_type, fingerprint, host_port
from pitstop.config import SshSettings

if TYPE_CHECKING:  # paramiko costs ~100 ms to import; only pay it when SSH is used
    import paramiko

# seconds the remote side waits past our timeout before killing the command (timeout -k)
_REMOTE_GRACE_S = 2
# read timeout of a connection's paramiko thread while in use (paramiko's own) and while pooled
_BUSY_READ_TIMEOUT_S = 0.1
_IDLE_READ_TIMEOUT_S = 5.0


class SshError(RuntimeError):
    """A host could not be reached or would not let us in; the message says which and why."""


class UnknownHostKey(SshError):
    """The host's key is not in known_hosts and trust-on-first-use is off."""


class HostKeyChanged(SshError):
    """known_hosts has other keys for the host than the one it sent (or the key is @revoked)."""


class _ConnectError(SshError):
    """A failure before any command ran: safe to retry."""


class SshRunner:
    """Runs argv lists on nodes over SSH. Use as a context manager or call `close()`."""

    def __init__(self, settings: SshSettings | None = None, sleep: Callable[[float], None] = time.sleep):
        self.settings = settings or SshSettings()
        self._sleep = sleep
        s = self.settings
        self._pool = _Pool(per_host=s.pool_per_host, total=s.pool_max_idle, idle_s=s.pool_idle_s)
        self._known_hosts = KnownHostsFile.shared(self._known_hosts_path())
        self._client_key: paramiko.PKey | None = None
        self._client_key_lock = threading.Lock()

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
        key = (host, address, port, self._user())
        try:
            client = self._checkout(key, where)
        except SshError as exc:
            status = HostStatus.TIMEOUT if isinstance(exc, _ConnectTimeout) else HostStatus.ERROR
            return result(status, error=str(exc))
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
        return len(self._pool)

    def close(self) -> None:
        for client in self._pool.drain():
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

    def _checkout(self, key: tuple[str, str, int, str], where: str) -> paramiko.SSHClient:
        client = self._pool.take(key)
        if client is not None:
            return client
        attempts = self.settings.connect_retries + 1
        delay = self.settings.retry_backoff_s
        for attempt in range(1, attempts + 1):
            try:
                return self._connect(key, where)
            except _ConnectError as exc:
                if attempt == attempts:
                    raise type(exc)(f"{exc} (after {attempts} attempts)") from exc
                self._sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def _checkin(self, key: tuple[str, str, int, str], client: paramiko.SSHClient) -> None:
        for stale in self._pool.give(key, client):
            _close_quietly(stale)

    def _connect(self, key: tuple[str, str, int, str], where: str) -> paramiko.SSHClient:
        import paramiko

        node, address, port, user = key
        check = _HostKeyCheck(self._parsed_known_hosts(), _key_names(node, address, port), where,
                              self._known_hosts if self.settings.trust_on_first_use else None)
        pkey = self._load_client_key()
        client = paramiko.SSHClient()  # its own host-key store stays empty: `check` decides
        client.set_missing_host_key_policy(check)
        timeout = self.settings.connect_timeout_s
        key_file = self.settings.key_file
        started = time.monotonic()
        try:
            client.connect(
                hostname=address,
                port=port,
                username=user,
                pkey=pkey,
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
                channel_timeout=timeout,
                allow_agent=False,
                look_for_keys=key_file is None,
                transport_factory=check.transport,
            )
            return client
        except SshError:  # host key refused: not retried
            _close_quietly(client)
            raise
        except paramiko.AuthenticationException as exc:
            _close_quietly(client)
            raise SshError(
                f"{where}: login refused for user {user!r} with key {key_file or '(default keys)'}: {exc}"
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

    def _parsed_known_hosts(self) -> KnownHosts:
        try:
            return self._known_hosts.current()
        except (OSError, UnicodeError) as exc:
            raise SshError(f"cannot read known_hosts {self._known_hosts.path}: {exc}") from exc

    def _load_client_key(self) -> paramiko.PKey | None:
        """ssh.key_file, loaded once per runner (paramiko would read it for every connection)."""
        if self.settings.key_file is None:
            return None  # paramiko looks for ~/.ssh/id_* itself
        import paramiko

        with self._client_key_lock:
            if self._client_key is None:
                path = Path(self.settings.key_file).expanduser()
                try:
                    key = paramiko.PKey.from_path(path)
                    cert = Path(f"{path}-cert.pub")
                    if cert.is_file():  # what paramiko's key_filename does too
                        key.load_certificate(str(cert))
                except (OSError, paramiko.SSHException, ValueError) as exc:
                    raise SshError(
                        f"cannot load ssh.key_file {path}: {exc} (it must be a private key without a passphrase)"
                    ) from exc
                self._client_key = key
            return self._client_key

    def _known_hosts_path(self) -> Path:
        return Path(self.settings.known_hosts or "~/.ssh/known_hosts").expanduser()

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


class _Pool:
    """Idle connections for reuse: at most `per_host` per node and `total` in all (the oldest go
    first); one idle longer than `idle_s` is closed, not reused (a firewall may have dropped it)."""

    def __init__(self, per_host: int, total: int, idle_s: float, clock: Callable[[], float] = time.monotonic):
        self.per_host, self.total, self.idle_s, self.clock = per_host, total, idle_s, clock
        self._lock = threading.Lock()
        self._by_key: dict[tuple, list[int]] = {}
        self._idle: OrderedDict[int, tuple[tuple, object, float]] = OrderedDict()  # oldest first

    def __len__(self) -> int:
        with self._lock:
            return len(self._idle)

    def take(self, key: tuple):
        """A live idle connection for `key`, or None (dead and expired ones are closed)."""
        while True:
            with self._lock:
                stale = self._expire()
                client = self._pop_newest(key)
            for old in stale:
                _close_quietly(old)
            if client is None:
                return None
            transport = client.get_transport()
            if transport is not None and transport.is_active():
                _read_timeout(client, _BUSY_READ_TIMEOUT_S)
                return client
            _close_quietly(client)

    def give(self, key: tuple, client) -> list:
        """Keep `client` for reuse; returns the connections to close instead (over a bound, expired)."""
        with self._lock:
            if len(self._by_key.get(key, ())) >= self.per_host or self.total == 0:
                return [client, *self._expire()]
            self._by_key.setdefault(key, []).append(id(client))
            _read_timeout(client, _IDLE_READ_TIMEOUT_S)
            self._idle[id(client)] = (key, client, self.clock())
            stale = self._expire()
            while len(self._idle) > self.total:
                stale.append(self._pop_oldest())
            return stale

    def drain(self) -> list:
        with self._lock:
            clients = [client for _, client, _ in self._idle.values()]
            self._idle.clear()
            self._by_key.clear()
            return clients

    def _expire(self) -> list:
        """Pop the connections idle too long (the lock is held)."""
        stale, limit = [], self.clock() - self.idle_s
        while self._idle and next(iter(self._idle.values()))[2] < limit:
            stale.append(self._pop_oldest())
        return stale

    def _pop_newest(self, key: tuple):
        ids = self._by_key.get(key)
        if not ids:
            return None
        ident = ids.pop()
        if not ids:
            del self._by_key[key]
        return self._idle.pop(ident)[1]

    def _pop_oldest(self):
        ident, (key, client, _) = self._idle.popitem(last=False)
        ids = self._by_key[key]
        ids.remove(ident)
        if not ids:
            del self._by_key[key]
        return client


def _key_names(node: str, address: str, port: int) -> list[str]:
    """Where known_hosts may file a node's key: its name first, then the address it is reached at."""
    names = [host_port(node, port), host_port(address, port)]
    return names[:1] if names[0] == names[1] else names


def _algorithms(keys: tuple[HostKey, ...]) -> list[str]:
    """Host-key algorithms that make the server show a key we know (an RSA key signs as rsa-sha2)."""
    out: list[str] = []
    for key in keys:
        out += ["rsa-sha2-512", "rsa-sha2-256"] if key.key_type == "ssh-rsa" else [key.key_type]
    return out


class _HostKeyCheck:
    """Checks the host's key against the parsed known_hosts. paramiko's own store stays empty, so
    it asks `missing_host_key` about every host; nothing is ever accepted without a match, except
    with trust-on-first-use (then recorded). One instance per connection."""

    def __init__(self, known: KnownHosts, names: list[str], where: str, record: KnownHostsFile | None):
        self.known, self.names, self.where, self.record = known, names, where, record
        self.filed_as, self.keys = names[0], ()
        for name in names:  # the first name that has keys decides (like OpenSSH's HostKeyAlias)
            if keys := known.keys_for(name):
                self.filed_as, self.keys = name, keys
                break

    def transport(self, sock, disabled_algorithms=None):
        """paramiko's Transport, asking first for the host-key types known_hosts has for this host
        (otherwise a host with RSA and ed25519 keys shows ed25519 and looks changed)."""
        import paramiko

        transport = paramiko.Transport(sock, disabled_algorithms=disabled_algorithms)
        options = transport.get_security_options()
        offered = list(options.key_types)
        wanted = [a for a in dict.fromkeys(_algorithms(self.keys)) if a in offered]
        options.key_types = wanted + [a for a in offered if a not in wanted]
        return transport

    def missing_host_key(self, client, hostname, key) -> None:
        blob = key.asbytes()
        sent = f"{blob_type(blob)} {fingerprint(blob)}"
        if blob in self.known.revoked:
            raise HostKeyChanged(f"{self.where}: host key {sent} is marked @revoked in {self.known.path}; refused")
        if any(k.blob == blob for k in self.keys):
            return
        if self.keys:
            raise HostKeyChanged(self._changed(sent, blob_type(blob)))
        if self.record is not None:
            self.record.append(self.names[0], blob_type(blob), blob)
            return
        raise UnknownHostKey(
            f"{self.where}: host key {sent} is not in {self.known.where()} (looked for "
            f"{' and '.join(self.names)}); check it on the node (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub), "
            f"then add it (ssh-keyscan prints the line), or set ssh.trust_on_first_use=true"
        )

    def _changed(self, sent: str, sent_type: str | None) -> str:
        same_type = [k for k in self.keys if k.key_type == sent_type] or list(self.keys)
        known = "; ".join(f"{k.describe()} (line {k.line})" for k in same_type)
        return (
            f"{self.where}: host key CHANGED: {self.known.path} has {known} for {self.filed_as}, but the "
            f"host sent {sent}. The node was reinstalled, or someone is in the middle: compare with "
            f"ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub on the node's console, then fix line "
            f"{same_type[0].line} of {self.known.path}"
        )


def _read_timeout(client, seconds: float) -> None:
    """How often the connection's paramiko thread wakes up when nothing arrives. paramiko's 0.1 s
    costs ~0.2 ms of CPU per idle connection per second: a pool of 2,048 would burn 40 % of a
    core doing nothing. Data and EOF wake it at once either way; `_close_quietly` shuts the
    socket down so that a close does too."""
    transport = client.get_transport()
    if transport is not None:
        try:
            transport.sock.settimeout(seconds)
        except OSError:
            pass  # already closed: the pool notices it is inactive


def _close_quietly(client) -> None:
    transport = client.get_transport()
    try:
        if transport is not None:
            transport.sock.shutdown(socket.SHUT_RDWR)  # wakes its thread now, not at its read timeout
    except (OSError, AttributeError):
        pass
    try:
        client.close()
    except Exception:  # noqa: BLE001 - closing a broken connection may itself fail
        pass
