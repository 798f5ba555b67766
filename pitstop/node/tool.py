"""Running one node tool (nvme, ipmitool, systemctl, scontrol...) with a time limit.

Checks call tools through a `Runner` so tests can hand them recorded output for hardware this
machine does not have. A tool that is missing or cannot start raises `ToolUnavailable` (the
check reports UNAVAILABLE); one that does not answer in time raises `ToolTimedOut` (each check
decides what that means: a hung NVMe controller is news, a slow BMC is not).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from pydantic import BaseModel

# Far above any real output (a full SEL is ~1 MB); guards the parsers against a runaway tool.
MAX_OUTPUT_CHARS = 8_000_000


class ToolOutput(BaseModel):
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str = ""

    @property
    def error_text(self) -> str:
        """The tool's own complaint, one line, for a summary."""
        text = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return text[0][:200] if text else f"exit status {self.returncode}"


class ToolUnavailable(RuntimeError):
    """The tool is not installed here or could not be started."""


class ToolTimedOut(TimeoutError):
    """The tool did not finish within its time limit (it was killed)."""


class Runner(Protocol):
    def __call__(self, argv: list[str], timeout_s: float) -> ToolOutput: ...


def run_tool(argv: list[str], timeout_s: float) -> ToolOutput:
    """Run `argv` (argv[0] looked up on PATH), C locale, no stdin; never raises other errors."""
    binary = shutil.which(argv[0])
    if binary is None:
        raise ToolUnavailable(f"{argv[0]} is not installed on this node")
    # C locale: ipmitool dates, systemctl and smartctl texts are then the documented ones.
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    try:
        proc = subprocess.run([binary, *argv[1:]], capture_output=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ToolTimedOut(f"{' '.join(argv[:3])} did not answer within {timeout_s:g} s") from exc
    except OSError as exc:
        raise ToolUnavailable(f"{argv[0]} could not be run: {exc.strerror or exc}") from exc
    return ToolOutput(
        argv=argv, returncode=proc.returncode,
        stdout=proc.stdout[:MAX_OUTPUT_CHARS].decode("utf-8", errors="replace"),
        stderr=proc.stderr[:MAX_OUTPUT_CHARS].decode("utf-8", errors="replace"),
    )


_T = TypeVar("_T")
_R = TypeVar("_R")


def call_all_within(fn: Callable[[_T], _R], items: Sequence[_T], timeout_s: float, name: str = "probe") -> list[_R | None]:
    """`fn(item)` for every item at once, each in a daemon thread; None for each that has not
    answered within `timeout_s` in total. For calls no timeout can interrupt (stat/statvfs on a
    hung NFS mount blocks in the kernel): the thread is abandoned and ends with the process."""
    results: list[_R | None] = [None] * len(items)

    def run(i: int, item: _T) -> None:
        results[i] = fn(item)

    threads = [threading.Thread(target=run, args=(i, item), name=f"pitstop-{name}-{i}", daemon=True)
               for i, item in enumerate(items)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return list(results)  # a copy: an abandoned thread finishing later changes nothing
