"""Read a log while the wrapper still appends to it, so classification keeps pace with the job.

A `FollowedLog` is a binary stream over a regular file that, at the current end of the file,
waits for more instead of returning EOF, until `ended` is set (the wrapper has closed its copy
of the log); then one last read takes what was written before that, and EOF is real. By the time
a job that printed 50 GB ends, all but its last window has been scanned, so the verdict is
ready within Slurm's KillWait instead of a minute later.
Standard library only.
"""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path

POLL_S = 0.1  # how often a quiet log is looked at again; `ended` interrupts the wait


class FollowedLog(io.RawIOBase):
    def __init__(self, path: Path | str, ended: threading.Event, poll_s: float = POLL_S) -> None:
        super().__init__()
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._ended = ended
        self._poll_s = poll_s

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd  # a regular file: the scanner may re-read earlier ranges with pread

    def readinto(self, buffer) -> int:
        while True:
            got = os.readv(self._fd, [buffer])
            if got or self._ended.is_set():
                if got == 0 and self._ended.is_set():
                    # The writer may have appended between our read and `ended`: look once more.
                    return os.readv(self._fd, [buffer])
                return got
            self._ended.wait(self._poll_s)

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()
