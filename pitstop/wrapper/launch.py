"""Start the child with its output on pipes, in its own session.

os.posix_spawnp (glibc: vfork + exec, and it reports exec failures such as ENOENT as its own
error) instead of subprocess, whose import costs ~5 ms on every job launch. Like a shell, and
unlike subprocess, descriptors the wrapper inherited stay open in the child: an MPI/PMI launcher
(srun --mpi=pmi2 passes PMI_FD) relies on that. The wrapper's own descriptors are close-on-exec.
Standard library only.
"""

from __future__ import annotations

import _signal  # the C module under `signal`, already loaded; `signal` adds ~3 ms of enums
import fcntl
import os

from pitstop.wrapper.exitstatus import NOT_EXECUTABLE, NOT_FOUND

# Bigger pipes mean fewer wake-ups at high output rates; refused quietly above pipe-max-size.
PIPE_BYTES = 1 << 20
# Python ignores SIGPIPE and SIGXFSZ for itself; a child must get the default, as from a shell.
DEFAULT_SIGNALS = (_signal.SIGPIPE, _signal.SIGXFSZ)


class LaunchFailed(Exception):
    """The command could not be started; `exit_code` is what a shell would return."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _pipe() -> tuple[int, int]:
    r, w = os.pipe()  # both close-on-exec (PEP 446)
    try:
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (OSError, AttributeError):  # over pipe-max-size, or not Linux
        pass
    if w <= 2:  # the wrapper was started with stdout/stderr closed: dup2 onto it would be a no-op
        w2 = fcntl.fcntl(w, fcntl.F_DUPFD_CLOEXEC, 3)
        os.close(w)
        w = w2
    return r, w


def launch(command: list[str]) -> tuple[int, int, int]:
    """(pid, stdout read fd, stderr read fd). Raises LaunchFailed like a shell would."""
    out_r, out_w = _pipe()
    err_r, err_w = _pipe()
    try:
        pid = os.posix_spawnp(
            command[0],
            command,
            os.environ,
            file_actions=[(os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)],
            setsid=True,
            setsigdef=DEFAULT_SIGNALS,
        )
    except FileNotFoundError:
        _close(out_r, err_r)
        raise LaunchFailed(f"{command[0]}: command not found", NOT_FOUND) from None
    except PermissionError:
        _close(out_r, err_r)
        raise LaunchFailed(
            f"{command[0]}: permission denied (not executable, or a directory)", NOT_EXECUTABLE
        ) from None
    except (OSError, ValueError) as exc:  # ENOEXEC, E2BIG, ELOOP, NUL in an argument...
        _close(out_r, err_r)
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise LaunchFailed(f"{command[0]}: cannot execute: {reason}", NOT_EXECUTABLE) from None
    finally:
        _close(out_w, err_w)
    return pid, out_r, err_r


def wait_exit(pid: int) -> int:
    """The child's status as Popen.returncode has it: -N when signal N killed it.
    Signal handlers still run while this waits (PEP 475 retries the wait after them)."""
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _close(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
