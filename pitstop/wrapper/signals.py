"""Forward the signals a scheduler or a terminal sends the wrapper to the child's process group.

The child runs in its own session (so a Ctrl-C does not reach it twice), which means the wrapper
must pass on what it receives. Standard library only: `_signal`, the C module under `signal`,
which the interpreter has already loaded (`signal` itself builds enums, ~3 ms per launch).
"""

from __future__ import annotations

import _signal as signal
import os

# INT/TERM/HUP per the issue; QUIT for core-dump requests; USR1/USR2 because `sbatch --signal`
# uses them as the "time limit is near, checkpoint now" warning.
FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


class SignalForwarder:
    """Installed before the child exists; signals that arrive before it does are replayed."""

    def __init__(self) -> None:
        self.pgid: int | None = None
        self.received: list[int] = []
        self._pending: list[int] = []
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        for sig in FORWARDED:
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except (OSError, ValueError):  # not the main thread, or not allowed here
                pass

    def attach(self, pgid: int) -> None:
        self.pgid = pgid
        pending, self._pending = self._pending, []
        for sig in pending:
            self._send(sig)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            try:
                signal.signal(sig, handler)  # type: ignore[arg-type]
            except (OSError, ValueError, TypeError):
                pass
        self._previous.clear()

    def _handle(self, signum: int, _frame) -> None:
        self.received.append(signum)
        if self.pgid is None:
            self._pending.append(signum)
        else:
            self._send(signum)

    def _send(self, signum: int) -> None:
        try:
            os.killpg(self.pgid, signum)
        except ProcessLookupError:  # the group is gone: nothing left to tell
            pass
        except PermissionError:  # a setuid child changed identity; try the leader alone
            try:
                os.kill(self.pgid, signum)
            except OSError:
                pass

    @property
    def names(self) -> list[str]:
        import signal as named

        return [named.Signals(s).name for s in self.received]
