"""Logs written in UTF-16 or UTF-32 (Windows tools, some PowerShell redirects): found by their
byte-order mark and decoded to UTF-8 as they stream, so the rules (UTF-8/ASCII patterns) see
them. Every other stream is handed back untouched: only its first four bytes are looked at, and
a regular file is sought back to where it was, so the scanner's fast paths still apply.
"""

from __future__ import annotations

import codecs
import io
from typing import BinaryIO

# Longest first: the UTF-32-LE mark begins with the UTF-16-LE one.
BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
BOM_PROBE = 4
RAW_CHUNK = 4 * 1024 * 1024  # encoded bytes decoded per step: memory stays bounded


def bom_encoding(head: bytes) -> tuple[str, int] | None:
    """(codec, BOM length) when `head` starts with a UTF-16/32 byte-order mark."""
    for bom, codec in BOMS:
        if head.startswith(bom):
            return codec, len(bom)
    return None


class _Prefixed(io.RawIOBase):
    """Bytes already read from a stream that cannot seek back, then the rest of that stream."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self._head = head
        self._stream = stream

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:  # same offsets as the stream: the head came from its start
        return self._stream.fileno()

    def readinto(self, buffer) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        readinto = getattr(self._stream, "readinto", None)
        if readinto is not None:
            return readinto(buffer) or 0
        chunk = self._stream.read(len(buffer)) or b""
        buffer[: len(chunk)] = chunk
        return len(chunk)


class _ToUtf8(io.RawIOBase):
    """UTF-8 bytes of a UTF-16/32 stream, decoded chunk by chunk (undecodable units: U+FFFD)."""

    def __init__(self, stream: BinaryIO, codec: str, pending: bytes) -> None:
        self._stream = stream
        self._decoder = codecs.getincrementaldecoder(codec)(errors="replace")
        self._out = b""
        self._pending = pending  # encoded bytes read past the BOM while probing
        self._eof = False

    def readable(self) -> bool:
        return True

    def _fill(self) -> None:
        while not self._out and not self._eof:
            raw = self._pending + (self._stream.read(RAW_CHUNK) or b"")
            self._pending = b""
            if not raw:
                self._eof = True
                self._out = self._decoder.decode(b"", final=True).encode("utf-8", "surrogatepass")
            else:
                self._out = self._decoder.decode(raw).encode("utf-8", "surrogatepass")

    def readinto(self, buffer) -> int:
        self._fill()
        n = min(len(buffer), len(self._out))
        buffer[:n] = self._out[:n]
        self._out = self._out[n:]
        return n


def _probe(stream: BinaryIO) -> bytes:
    head = b""
    while len(head) < BOM_PROBE:
        chunk = stream.read(BOM_PROBE - len(head))
        if not chunk:
            break
        head += chunk
    return head


def utf8_view(stream: BinaryIO) -> BinaryIO:
    """`stream` itself (positioned as it was) unless it starts with a UTF-16/32 BOM; then a
    stream of its text as UTF-8, without the BOM."""
    try:
        start = stream.tell() if stream.seekable() else None
    except (AttributeError, OSError, ValueError):
        start = None
    head = _probe(stream)
    found = bom_encoding(head)
    if found is None:
        if start is not None:
            stream.seek(start)
            return stream
        return _Prefixed(head, stream)  # type: ignore[return-value]
    codec, bom_len = found
    return _ToUtf8(stream, codec, head[bom_len:])  # type: ignore[return-value]
