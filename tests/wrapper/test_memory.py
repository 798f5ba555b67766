"""Bounded memory whatever the output volume: the wrapper's peak RSS stays under ~100 MB."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.wrapper.conftest import PITSTOP, PY, latest_run_dir

RSS_LIMIT_KB = 100 * 1024

# 1 MiB of ordinary log lines, written `n` times: a fast, realistic firehose
FIREHOSE = """
import sys
block = b"".join(b"step %08d loss 2.3456 lr 3.0e-4 tokens/s 123456 grad_norm 0.98\\n" % i for i in range(16384))
block = block[: 1 << 20]
out = sys.stdout.buffer
for _ in range(int(sys.argv[1])):
    out.write(block)
out.flush()
"""


def _peak_rss_kb(cmd: list[str], home: Path, timeout: float) -> tuple[int, int]:
    """Run the wrapper with stdout to /dev/null; poll VmHWM (the kernel's own peak) until exit."""
    env = {**os.environ, "PITSTOP_HOME": str(home)}
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen([PITSTOP, "run", "--", *cmd], stdout=devnull, stderr=subprocess.PIPE, env=env)
    peak = 0

    def poll() -> None:
        nonlocal peak
        while proc.poll() is None:
            try:
                for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
            except (FileNotFoundError, ProcessLookupError, ValueError):
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=poll)
    watcher.start()
    try:
        proc.wait(timeout=timeout)
    finally:
        watcher.join()
    return proc.returncode, peak


@pytest.mark.slow
def test_two_gigabytes_of_output(isolated_home: Path) -> None:
    try:
        rc, peak = _peak_rss_kb([PY, "-c", FIREHOSE, "2048"], isolated_home, timeout=240)
        run_dir = latest_run_dir(isolated_home)
        assert rc == 0
        assert (run_dir / "stdout.log").stat().st_size == 2048 << 20
        assert peak < RSS_LIMIT_KB, f"wrapper peak RSS {peak} kB"
        assert (run_dir / "result.json").read_text().count('"stdout_bytes": 2147483648') == 1
    finally:
        shutil.rmtree(isolated_home / "runs", ignore_errors=True)  # 4+ GB: do not keep it around


@pytest.mark.slow
def test_ten_million_lines(isolated_home: Path) -> None:
    try:
        rc, peak = _peak_rss_kb(["seq", "10000000"], isolated_home, timeout=240)
        run_dir = latest_run_dir(isolated_home)
        assert rc == 0
        assert peak < RSS_LIMIT_KB, f"wrapper peak RSS {peak} kB"
        expected = subprocess.run(["seq", "10000000"], capture_output=True).stdout
        assert (run_dir / "stdout.log").read_bytes() == expected
        with open(run_dir / "combined.log", "rb") as fh:
            count = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
        assert count == 10_000_000
    finally:
        shutil.rmtree(isolated_home / "runs", ignore_errors=True)


@pytest.mark.slow
def test_binary_firehose_without_newlines(isolated_home: Path) -> None:
    try:
        rc, peak = _peak_rss_kb(["head", "-c", str(300 << 20), "/dev/urandom"], isolated_home, timeout=240)
        run_dir = latest_run_dir(isolated_home)
        assert rc == 0
        assert peak < RSS_LIMIT_KB, f"wrapper peak RSS {peak} kB"
        assert (run_dir / "stdout.log").stat().st_size == 300 << 20
    finally:
        shutil.rmtree(isolated_home / "runs", ignore_errors=True)
