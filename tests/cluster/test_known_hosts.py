"""The known_hosts parser on its own (no sshd): OpenSSH's format, what it skips and says, and
trust-on-first-use appends that keep the parse instead of re-reading the file."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import struct
from pathlib import Path

from pitstop.cluster import known_hosts as kh


def _blob(key_type: str = "ssh-ed25519", seed: bytes = b"k") -> bytes:
    body = hashlib.sha256(seed).digest()
    return b"".join(struct.pack(">I", len(p)) + p for p in (key_type.encode(), body))


def _b64(blob: bytes) -> str:
    return base64.b64encode(blob).decode()


def _hashed(name: str, salt: bytes) -> str:
    mac = hmac.digest(salt, name.encode(), "sha1")  # OpenSSH's HashKnownHosts, from the stdlib
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(mac).decode()}"


def test_names_markers_and_what_is_skipped(tmp_path: Path) -> None:
    a, b, c = _blob(seed=b"a"), _blob(seed=b"b"), _blob(seed=b"c")
    text = "\n".join([
        "# comment",
        f"gpu01,[gpu02]:2222,10.0.0.1 ssh-ed25519 {_b64(a)} root@gpu01",
        f"{_hashed('[gpu03]:2222', os.urandom(20))} ssh-ed25519 {_b64(b)}",
        "gpu04 ssh-ed25519 not*base64",  # line 4: skipped
        f"gpu05 ssh-rsa {_b64(a)}",  # line 5: the blob says ed25519, not rsa: skipped
        f"@cert-authority *.cluster ssh-ed25519 {_b64(c)}",
        f"@revoked * ssh-ed25519 {_b64(c)}",
        "",
    ])
    parsed = kh.parse_known_hosts(text, tmp_path / "known_hosts")
    assert [k.blob for k in parsed.keys_for("gpu01")] == [a] == [k.blob for k in parsed.keys_for("[gpu02]:2222")]
    assert [k.line for k in parsed.keys_for("10.0.0.1")] == [2]
    assert [k.blob for k in parsed.keys_for("[gpu03]:2222")] == [b] and parsed.keys_for("gpu03") == ()
    assert parsed.keys_for("gpu04") == parsed.keys_for("gpu05") == parsed.keys_for("*.cluster") == ()
    assert parsed.revoked == {c}
    assert parsed.skipped == [4, 5] and "lines 4, 5 not understood" in parsed.where()


def test_fingerprint_is_openssh_sha256() -> None:
    blob = _blob()
    expected = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    assert kh.fingerprint(blob) == f"SHA256:{expected}"
    assert kh.fingerprint(blob) != kh.fingerprint(_blob(seed=b"other"))


def test_append_keeps_the_parse_and_never_glues_lines(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(f"gpu01 ssh-ed25519 {_b64(_blob(seed=b'1'))}")  # no newline at the end
    loads = []
    real = kh.load_known_hosts
    monkeypatch.setattr(kh, "load_known_hosts", lambda p: loads.append(p) or real(p))
    known = kh.KnownHostsFile(path)
    assert known.current().keys_for("gpu02") == ()
    known.append("gpu02", "ssh-ed25519", _blob(seed=b"2"))
    known.append("gpu03", "ssh-ed25519", _blob(seed=b"3"))
    assert [k.line for k in known.current().keys_for("gpu03")] == [3] and len(loads) == 1
    reread = kh.load_known_hosts(path)  # what the file says matches what the parse says
    assert [(n, reread.keys_for(n)) for n in ("gpu01", "gpu02", "gpu03")] == \
           [(n, known.current().keys_for(n)) for n in ("gpu01", "gpu02", "gpu03")]


def test_a_file_changed_by_someone_else_is_read_again_after_an_append(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    known = kh.KnownHostsFile(path)
    assert not known.current().exists and "no such file" in known.current().where()
    path.write_text(f"gpu09 ssh-ed25519 {_b64(_blob(seed=b'9'))}\n")  # an operator adds a line
    known.append("gpu01", "ssh-ed25519", _blob(seed=b"1"))
    assert known.current().keys_for("gpu09") and known.current().keys_for("gpu01")


def test_shared_is_one_parse_per_file_in_the_process(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    assert kh.KnownHostsFile.shared(path) is kh.KnownHostsFile.shared(tmp_path / "sub" / ".." / "known_hosts")
    assert kh.KnownHostsFile.shared(path) is not kh.KnownHostsFile.shared(tmp_path / "other")
