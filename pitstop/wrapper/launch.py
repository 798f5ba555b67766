"""Start the child with its output on pipes, in its own session. Standard library only."""

from __future__ import annotations

import fcntl
import os
import subprocess

from pitstop.wrapper.exitstatus import NOT_EXECUTABLE, NOT_FOUND

# Bigger pipes mean fewer wake-ups at high output rates; refused quietly above pipe-max-size.
PIPE_BYTES = 1 << 20


class LaunchFailed(Exception):
    """The command could not be started; `exit_code` is what a shell would return."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _pipe() -> tuple[int, int]:
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        pass
    return r, w


def launch(command: list[str]) -> tuple[subprocess.Popen, int, int]:
    """(process, stdout read fd, stderr read fd). Raises LaunchFailed like a shell would."""
    out_r, out_w = _pipe()
    err_r, err_w = _pipe()
    try:
        proc = subprocess.Popen(
            command, stdout=out_w, stderr=err_w, start_new_session=True, close_fds=True
        )
    except FileNotFoundError:
        _close(out_r, err_r)
        raise LaunchFailed(f"{command[0]}: command not found", NOT_FOUND) from None
    except PermissionError:
        _close(out_r, err_r)
        raise LaunchFailed(
            f"{command[0]}: permission denied (not executable, or a directory)", NOT_EXECUTABLE
        ) from None
    except OSError as exc:  # ENOEXEC, E2BIG, ELOOP...: found but cannot run
        _close(out_r, err_r)
        raise LaunchFailed(f"{command[0]}: cannot execute: {exc.strerror}", NOT_EXECUTABLE) from None
    finally:
        _close(out_w, err_w)
    return proc, out_r, err_r


def _close(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
