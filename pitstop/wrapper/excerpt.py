"""Bounded reads of logs of any size: the last lines, and head+tail excerpts for attaching."""

from __future__ import annotations

import os
from pathlib import Path

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(n: int | None) -> str:
    if n is None:
        return "size unknown"
    size = float(n)
    for unit in _UNITS:
        if size < 1024 or unit == _UNITS[-1]:
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def printable(text: str, limit: int = 400) -> str:
    """One display line: control characters made visible, never longer than `limit`."""
    out = "".join(ch if ch.isprintable() or ch == "\t" else repr(ch)[1:-1] for ch in text)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def tail_lines(path: Path, count: int, max_bytes: int = 256 * 1024) -> list[str]:
    """The last `count` lines of a file, reading at most `max_bytes` from its end."""
    if count <= 0:
        return []
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            start = max(0, size - max_bytes)
            fh.seek(start)
            data = fh.read(max_bytes)
    except OSError:
        return []
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # the first one is cut
    if lines and lines[-1] == b"":
        lines.pop()
    # a progress bar redraws with \r: show what it last said
    return [printable(line.rsplit(b"\r", 1)[-1].decode("utf-8", "replace")) for line in lines[-count:]]


def write_head_tail(src: Path, dst: Path, budget: int) -> tuple[int, int]:
    """Copy the first and last budget/2 bytes of `src` to `dst` with a marker between.

    Returns (source size, excerpt size). Reads only what it writes, whatever the source size.
    """
    half = max(1, budget // 2)
    with open(src, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(0)
        head = fh.read(half)
        fh.seek(max(half, size - half))
        tail = fh.read(half)
    marker = (
        f"\n[... pitstop: {human_bytes(size - len(head) - len(tail))} left out here; "
        f"the full log is {src} ({human_bytes(size)}) ...]\n"
    ).encode()
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(dst, "wb") as out:
        out.write(head + marker + tail)
    return size, len(head) + len(marker) + len(tail)
