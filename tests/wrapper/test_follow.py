"""The classifier scans the logs while the job still writes them (follow mode), so the verdict
is ready when the job ends; it must be exactly the verdict a scan of the finished files gives."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from classifiers import classify_files
from pitstop.cli.run_classifier import WORKER_ARGV
from pitstop.models import SchedulerFacts
from pitstop.wrapper.classify_child import ClassifierProcess
from pitstop.wrapper.follow import FollowedLog

XID = b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
NOISE = b"".join(b"step %08d loss 2.3456 lr 3.0e-4 tokens/s 123456\n" % i for i in range(20000))


def _read_pos(pid: int, path: Path) -> int | None:
    """Where process `pid` has read `path` up to (its descriptor's offset), or None if not open."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                for line in Path(f"/proc/{pid}/fdinfo/{fd}").read_text().splitlines():
                    if line.startswith("pos:"):
                        return int(line.split()[1])
        except OSError:
            continue
    return None


def _wait_until(predicate, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_worker_scans_a_growing_log_and_gives_the_whole_file_verdict(tmp_path: Path) -> None:
    err, out = tmp_path / "stderr.log", tmp_path / "stdout.log"
    err.write_bytes(b""), out.write_bytes(b"")
    worker = ClassifierProcess(WORKER_ARGV, follow=[err, out])
    try:
        with open(out, "ab", buffering=0) as log:
            log.write(b"".join(NOISE.splitlines(keepends=True)[:20]) + XID)
            for _ in range(40):  # ~40 MB, several scan windows
                log.write(NOISE)
            # The job is still "running": the worker must already have read most of the log.
            size = out.stat().st_size
            assert _wait_until(lambda: (_read_pos(worker.proc.pid, out) or 0) >= size - (9 << 20)), (
                f"worker read {_read_pos(worker.proc.pid, out)} of {size} bytes while the log grew"
            )
            log.write(b"Segmentation fault (core dumped)\n")  # the last words, after the scan caught up
        verdict = worker([err, out], SchedulerFacts(exit_code=139), 60.0)
    finally:
        worker.close()
    assert verdict == classify_files([err, out], SchedulerFacts(exit_code=139))
    assert verdict.cause.value == "gpu_hardware"
    assert any(e.line == 21 and "Xid" in e.text for e in verdict.evidence), verdict.evidence


def test_asked_about_other_files_it_reads_those_from_the_start(tmp_path: Path) -> None:
    followed, other = tmp_path / "followed.log", tmp_path / "other.log"
    followed.write_bytes(b"all good\n")
    other.write_bytes(NOISE + XID)
    worker = ClassifierProcess(WORKER_ARGV, follow=[followed])
    try:
        verdict = worker([other], SchedulerFacts(exit_code=1), 60.0)
    finally:
        worker.close()
    assert verdict.cause.value == "gpu_hardware"


def test_worker_exits_when_the_wrapper_goes_away_mid_follow(tmp_path: Path) -> None:
    log = tmp_path / "stdout.log"
    log.write_bytes(NOISE)
    worker = ClassifierProcess(WORKER_ARGV, follow=[log])
    assert _wait_until(lambda: _read_pos(worker.proc.pid, log) == len(NOISE))
    worker.proc.stdin.close()  # what a SIGKILLed wrapper leaves: stdin at EOF, no request
    assert worker.proc.wait(10) == 0


def test_followed_log_returns_what_was_appended_just_before_the_end(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"")
    ended = threading.Event()
    got = bytearray()

    def reader() -> None:
        with FollowedLog(path, ended, poll_s=5.0) as stream:
            while chunk := stream.read(1 << 16):
                got.extend(chunk)

    thread = threading.Thread(target=reader)
    thread.start()
    time.sleep(0.2)  # the reader is waiting at the end of an empty file
    with open(path, "ab") as log:
        log.write(b"last words\n")
    ended.set()  # set right after the write: the wait ends at once, and the last read sees it
    thread.join(5)
    assert not thread.is_alive()
    assert bytes(got) == b"last words\n"
