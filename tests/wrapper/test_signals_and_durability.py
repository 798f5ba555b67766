"""Signals to the wrapper reach the child's process group; logs survive SIGKILL of either."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.wrapper.conftest import PITSTOP, PY, wait_for_run_dir, wait_for_text

TRAP_AND_EXIT_7 = """
import signal, sys, time
def bye(signum, frame):
    print(f"child got {signal.Signals(signum).name}", flush=True)
    sys.exit(7)
signal.signal(signal.SIGTERM, bye)
print("ready", flush=True)
time.sleep(60)
"""

# sh with a grandchild: the whole process group must get the signal, not just the leader
GROUP = "sleep 60 & echo ready; wait"


def _start(cmd: list[str], home: Path) -> subprocess.Popen:
    env = {**os.environ, "PITSTOP_HOME": str(home)}
    return subprocess.Popen([PITSTOP, "run", "--", *cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)


def test_sigterm_is_forwarded_and_the_report_still_finishes(isolated_home: Path) -> None:
    proc = _start([PY, "-c", TRAP_AND_EXIT_7], isolated_home)
    run_dir = wait_for_run_dir(isolated_home)
    wait_for_text(run_dir / "stdout.log", b"ready")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 7, err
    assert b"child got SIGTERM" in out
    result = (run_dir / "result.json").read_text()
    assert '"SIGTERM"' in result and '"exit_code": 7' in result
    assert '"cause"' in result  # classification ran after the signal


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_signal_reaches_the_whole_group(isolated_home: Path, sig: signal.Signals) -> None:
    proc = _start(["sh", "-c", GROUP], isolated_home)
    run_dir = wait_for_run_dir(isolated_home)
    wait_for_text(run_dir / "stdout.log", b"ready")
    started = time.monotonic()
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig
    assert time.monotonic() - started < 30  # the background `sleep 60` did not hold it up
    assert f'"{sig.name}"' in (run_dir / "result.json").read_text()


def test_log_survives_sigkill_of_the_wrapper(isolated_home: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    script = (
        "import os, sys, time\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "for i in range(3): print(f'progress {i}', flush=True)\n"
        "print('error so far', file=sys.stderr, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = _start([PY, "-c", script], isolated_home)
    run_dir = wait_for_run_dir(isolated_home)
    wait_for_text(run_dir / "stderr.log", b"error so far")
    wait_for_text(run_dir / "stdout.log", b"progress 2")
    # combined.log is written by its own thread, a few chunks behind the raw logs (pump.py): a
    # kill before it wrote them loses them by design. What it HAS written must survive.
    wait_for_text(run_dir / "combined.log", b"E| error so far")
    proc.kill()
    proc.communicate(timeout=10)
    child = int(pid_file.read_text())
    try:
        assert (run_dir / "stdout.log").read_bytes() == b"progress 0\nprogress 1\nprogress 2\n"
        assert (run_dir / "stderr.log").read_bytes() == b"error so far\n"
        combined = (run_dir / "combined.log").read_text()
        assert "O| progress 2" in combined and "E| error so far" in combined
        assert '"command"' in (run_dir / "metadata.json").read_text()
    finally:
        os.killpg(child, signal.SIGKILL)  # the child runs in its own session; end it here


def test_grandchild_holding_the_pipe_does_not_hang_the_wrapper(run_pitstop) -> None:
    done = run_pitstop(["sh", "-c", "echo started; sleep 30 & exit 6"],
                       env={"PITSTOP_WRAPPER__DRAIN_GRACE_S": "0.5"}, timeout=25)
    assert done.returncode == 6
    assert done.stdout == b"started\n"
