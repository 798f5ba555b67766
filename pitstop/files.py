"""Open a path that must be a regular file, without ever blocking on a FIFO or reading a device.

`open(path)` on a FIFO waits for a writer forever, and /dev/zero never ends: a command given
such a path by mistake (or by `<(...)` process substitution) must say so and go on instead.

    with open_regular(path) as stream: ...   # OSError (NotARegularFile for a FIFO, device...)
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

# What each kind of non-regular file is called in a message.
FILE_KINDS: tuple[tuple[object, str], ...] = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotARegularFile(OSError):
    """The path exists but is a FIFO, a device, a socket (or, as IsADirectoryError, a directory)."""


def file_kind(mode: int) -> str | None:
    """'a FIFO (named pipe)' etc. for a non-regular st_mode; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in FILE_KINDS if test(mode)), "not a regular file")


def _refuse(path: Path | str, kind: str) -> OSError:
    if kind == "a directory":
        return IsADirectoryError(errno.EISDIR, "it is a directory, not a regular file", str(path))
    return NotARegularFile(errno.EINVAL, f"it is {kind}, not a regular file", str(path))


def open_regular(path: Path | str) -> BinaryIO:
    """An unbuffered binary stream on `path` if it is a regular file; else an OSError whose
    strerror says what the path is. Never blocks: the kind is checked before and after opening
    (the open is non-blocking, so a FIFO swapped in between cannot hang it)."""
    kind = file_kind(os.stat(path).st_mode)
    if kind is not None:
        raise _refuse(path, kind)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        kind = file_kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise _refuse(path, kind)
        os.set_blocking(fd, True)
        return open(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def read_at_most(stream: BinaryIO, limit: int) -> bytes:
    """Up to `limit` bytes of `stream`, looping (one read of an unbuffered stream may return less)."""
    chunks, total = [], 0
    while total < limit:
        chunk = stream.read(limit - total)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)  # one read: no copy (the scanner's case)
