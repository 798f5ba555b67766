"""known_hosts, parsed once per change of the file and indexed by host name.

paramiko's `HostKeys.load` parses the whole file for every client, checks each new line against
all lines before it, and asks `logging` for a logger (a global lock) once per line: a sweep of
N new connections cost O(N^2) parses of N lines. Here one parse serves every connection of a
runner until the file changes (device, inode, size, mtime, ctime), and a lookup is a dict get
plus one HMAC per hashed line (cached per name).

The format is OpenSSH's: `names keytype base64 [comment]`, names comma-separated, plain or
hashed (`|1|salt|hmac`, HashKnownHosts). Like paramiko, names are literal (no `*`/`!`
patterns) and `@cert-authority` lines are not used; unlike paramiko, an `@revoked` key is
refused for every host. Lines it cannot read are skipped and counted, so an error can say so.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path


def host_port(name: str, port: int) -> str:
    """The name OpenSSH files a host under: `name`, or `[name]:port` off port 22."""
    return name if port == 22 else f"[{name}]:{port}"


def fingerprint(blob: bytes) -> str:
    """OpenSSH's SHA256 fingerprint (`ssh-keygen -lf`), unique per key, unlike a base64 prefix."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def blob_type(blob: bytes) -> str | None:
    """The key type a public-key blob names in its first field, or None when it is malformed."""
    if len(blob) < 4:
        return None
    (size,) = struct.unpack(">I", blob[:4])
    if size == 0 or 4 + size > len(blob):
        return None
    return blob[4 : 4 + size].decode("ascii", errors="replace")


@dataclass(frozen=True)
class HostKey:
    key_type: str
    blob: bytes
    line: int

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.blob)

    def describe(self) -> str:
        return f"{self.key_type} {self.fingerprint}"


@dataclass
class KnownHosts:
    """One parse of one known_hosts file."""

    path: Path
    exists: bool = True
    plain: dict[str, list[HostKey]] = field(default_factory=dict)
    hashed: list[tuple[_Hmac, bytes, HostKey]] = field(default_factory=list)  # (salted HMAC, digest, key)
    revoked: set[bytes] = field(default_factory=set)
    skipped: list[int] = field(default_factory=list)  # line numbers not understood
    lines: int = 0
    _cache: dict[str, tuple[HostKey, ...]] = field(default_factory=dict, repr=False)

    def keys_for(self, name: str) -> tuple[HostKey, ...]:
        """Every key filed under exactly `name` (already in `host_port` form)."""
        cached = self._cache.get(name)
        if cached is None:
            found = list(self.plain.get(name, ()))
            if self.hashed:  # one HMAC per hashed line: a salted name can only be checked, not indexed
                raw = name.encode()
                found += [k for salted, mac, k in self.hashed if salted.digest(raw) == mac]
            cached = self._cache[name] = tuple(sorted(found, key=lambda k: k.line))
        return cached

    def where(self) -> str:
        """The file, for messages; says when it does not exist or had lines that were skipped."""
        if not self.exists:
            return f"{self.path} (no such file)"
        if self.skipped:
            lines = ", ".join(map(str, self.skipped[:5])) + (", ..." if len(self.skipped) > 5 else "")
            return f"{self.path} (lines {lines} not understood, skipped)"
        return str(self.path)


def parse_known_hosts(text: str, path: Path) -> KnownHosts:
    parsed = KnownHosts(path=path)
    for number, raw in enumerate(text.splitlines(), 1):
        parsed.lines = number
        line = raw.strip()
        if line and not line.startswith("#") and not _add_line(parsed, line, number):
            parsed.skipped.append(number)
    return parsed


def load_known_hosts(path: Path) -> KnownHosts:
    """Read and parse the file (the one place that does: tests count calls here)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return KnownHosts(path=path, exists=False)
    return parse_known_hosts(text, path)


def _add_line(parsed: KnownHosts, line: str, number: int) -> bool:
    fields = line.split()
    marker = fields.pop(0) if fields[0].startswith("@") else None
    if len(fields) < 3 or marker not in (None, "@revoked", "@cert-authority"):
        return False
    names, key_type, encoded = fields[:3]
    try:
        blob = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return False
    if blob_type(blob) != key_type:
        return False
    if marker == "@revoked":
        parsed.revoked.add(blob)
    if marker is not None:
        return True  # a revocation applies to every host; CA lines are understood but unused
    key = HostKey(key_type, blob, number)
    for name in names.split(","):
        if name.startswith("|1|"):
            hashed = _hashed_name(name)
            if hashed is None:
                return False
            parsed.hashed.append((*hashed, key))
        elif name:
            parsed.plain.setdefault(name, []).append(key)
    return True


def _hashed_name(name: str) -> tuple[_Hmac, bytes] | None:
    parts = name.split("|")  # "", "1", salt, hmac
    if len(parts) != 4:
        return None
    try:
        salt, mac = base64.b64decode(parts[2], validate=True), base64.b64decode(parts[3], validate=True)
    except (binascii.Error, ValueError):
        return None
    return _Hmac(salt), mac


class _Hmac:
    """HMAC-SHA1 under one salt with the key pads hashed once: 2-3x faster per name than
    `hmac.digest`, which matters at one HMAC per hashed line per name looked up."""

    def __init__(self, salt: bytes):
        key = (hashlib.sha1(salt).digest() if len(salt) > 64 else salt).ljust(64, b"\0")
        self.inner = hashlib.sha1(bytes(b ^ 0x36 for b in key))
        self.outer = hashlib.sha1(bytes(b ^ 0x5C for b in key))

    def digest(self, message: bytes) -> bytes:
        inner, outer = self.inner.copy(), self.outer.copy()
        inner.update(message)
        outer.update(inner.digest())
        return outer.digest()


class KnownHostsFile:
    """The parsed file for many connections: re-read only when the file changed.

    `shared(path)` is the one instance per file in this process, so that the runners of
    successive flow runs inside `pitstop up` share the parse and its per-name lookups (a hashed
    file costs one HMAC per line for each name looked up: ~3 s for 2,048 names and lines, paid
    once per change of the file, not once per sweep)."""

    _shared: dict[Path, KnownHostsFile] = {}
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls, path: Path) -> KnownHostsFile:
        key = Path(os.path.abspath(path))
        with cls._shared_lock:
            if key not in cls._shared:
                cls._shared[key] = cls(key)
            return cls._shared[key]

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, ...] | None = None
        self._parsed: KnownHosts | None = None

    def current(self) -> KnownHosts:
        """The parse of the file as it is now (OSError when it exists but cannot be read)."""
        stamp = _stamp(self.path)
        with self._lock:  # one parse even when 32 connections ask at once
            if self._parsed is None or stamp != self._stamp:
                self._parsed = load_known_hosts(self.path)
                self._stamp = stamp
            return self._parsed

    def append(self, name: str, key_type: str, blob: bytes) -> None:
        """Record a key (trust on first use) in the file and in the parse."""
        with self._lock:
            before = _stamp(self.path)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            line = f"{name} {key_type} {base64.b64encode(blob).decode()}\n".encode()
            with self.path.open("a+b") as handle:
                if handle.tell() and (handle.seek(-1, os.SEEK_END), handle.read(1))[1] != b"\n":
                    line = b"\n" + line  # never glue our line onto an unterminated last line
                handle.write(line)
            parsed = self._parsed
            if parsed is None or before != self._stamp:
                return  # someone else changed the file too: the next current() re-reads it
            # only our line was added: keep the parse, or a first sweep of N new nodes parses N times
            parsed.lines += 1
            parsed.exists = True
            parsed.plain.setdefault(name, []).append(HostKey(key_type, blob, parsed.lines))
            parsed._cache.pop(name, None)
            self._stamp = _stamp(self.path)


def _stamp(path: Path) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
