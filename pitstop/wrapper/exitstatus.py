"""Exit status as a shell reports it. Standard library only."""

from __future__ import annotations

NOT_FOUND = 127  # POSIX shells: command not found
NOT_EXECUTABLE = 126  # found but cannot be executed
USAGE = 2


def shell_exit_code(returncode: int) -> tuple[int, int | None]:
    """(exit code, signal) from a Popen returncode: killed by signal N -> (128+N, N)."""
    if returncode < 0:
        return 128 - returncode, -returncode
    return returncode, None
