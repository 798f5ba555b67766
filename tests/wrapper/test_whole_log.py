"""The whole log is classified, however large, in a separate process with a time budget."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pitstop.models import SchedulerFacts
from pitstop.wrapper.classify_child import ClassifierFailed, ClassifierTimedOut, classify_in_child
from tests.wrapper.conftest import PY

# 1 MiB of ordinary training-log lines, printed `n` times after (or around) the fault
NOISE = (
    "import sys\n"
    "block = b''.join(b'step %08d loss 2.3456 lr 3.0e-4 tokens/s 123456 grad_norm 0.98\\n' % i"
    " for i in range(16384))[: 1 << 20]\n"
    "def noise(n):\n"
    "    for _ in range(n): sys.stdout.buffer.write(block)\n"
    "    sys.stdout.flush()\n"
)
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


def _lines_in(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")


def test_fault_on_the_first_line_of_a_big_log_is_found(run_pitstop) -> None:
    script = NOISE + f"print({XID!r}, flush=True)\nnoise(12)\n"
    done = run_pitstop([PY, "-c", script])
    assert done.returncode == 0
    log = done.run_dir / "stdout.log"
    assert log.stat().st_size > 12 << 20
    verdict = done.json("verdict.json")
    assert verdict["cause"] == "gpu_hardware", verdict
    [ev] = [e for e in verdict["evidence"] if "Xid" in e["text"]]
    assert ev["source"] == str(log) and ev["line"] == 1
    assert _lines_in(log)[ev["line"] - 1].decode() == XID


def test_fault_in_the_middle_has_its_true_line_number(run_pitstop) -> None:
    # 6 MiB of noise, the fault, 6 MiB more: neither a head nor a tail window would hold it
    script = (
        NOISE
        + "noise(6)\n"
        + "print('RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB', flush=True)\n"
        + "noise(6)\nraise SystemExit(1)\n"
    )
    done = run_pitstop([PY, "-c", script])
    assert done.returncode == 1
    log = done.run_dir / "stdout.log"
    verdict = done.json("verdict.json")
    assert verdict["cause"] == "cuda_oom", verdict
    [ev] = [e for e in verdict["evidence"] if "CUDA out of memory" in e["text"]]
    assert ev["source"] == str(log)
    data = log.read_bytes()
    assert ev["line"] == data[: data.index(b"RuntimeError: CUDA")].count(b"\n") + 1 > 90_000


def test_classifier_timeout_keeps_exit_code_and_says_so(run_pitstop) -> None:
    done = run_pitstop(
        [PY, "-c", NOISE + "noise(4)\nraise SystemExit(3)"],
        env={"PITSTOP_WRAPPER__CLASSIFY_TIMEOUT_S": "0.001"},
    )
    assert done.returncode == 3
    verdict = done.json("verdict.json")
    assert verdict["cause"] != "success"
    assert any("classifier timed out" in e["text"] for e in verdict["evidence"]), verdict
    result = done.json("result.json")
    assert any("classifier timed out" in w for w in result["warnings"])
    assert b"classifier timed out" in done.stderr


# --- the runner itself, against real worker processes ------------------------------------------

SLOW_WORKER = """
import json, sys, time
sys.stdin.read()
v = {"cause": "crash_signal", "signature": "signal-9-sigkill", "confidence": 0.5,
     "evidence": [{"line": 0, "text": "killed by signal 9", "source": "scheduler"}]}
print(json.dumps({"stage": "facts", "verdict": v}), flush=True)
time.sleep(60)
"""


def test_timeout_returns_the_exit_status_verdict_and_kills_the_worker(tmp_path: Path) -> None:
    start = time.monotonic()
    try:
        classify_in_child([sys.executable, "-c", SLOW_WORKER], [tmp_path / "x.log"], SchedulerFacts(signal=9), 1.0)
    except ClassifierTimedOut as exc:
        assert exc.fallback is not None and exc.fallback.signature == "signal-9-sigkill"
        assert "timed out after 1 s" in str(exc)
    else:
        raise AssertionError("no timeout")
    assert time.monotonic() - start < 10


def test_unreadable_log_is_named(tmp_path: Path) -> None:
    from pitstop.cli.run_classifier import WORKER_ARGV

    missing = tmp_path / "gone.log"
    try:
        classify_in_child(WORKER_ARGV, [missing], SchedulerFacts(exit_code=1), 60)
    except ClassifierFailed as exc:
        assert "gone.log" in str(exc)
    else:
        raise AssertionError("a missing log must be an error")


def test_worker_that_crashes_reports_its_stderr(tmp_path: Path) -> None:
    try:
        classify_in_child([sys.executable, "-c", "import sys; sys.stdin.read(); raise SystemExit('boom: no rules')"],
                          [], SchedulerFacts(exit_code=1), 30)
    except ClassifierFailed as exc:
        assert "boom: no rules" in str(exc) and "exited 1" in str(exc)
    else:
        raise AssertionError("no error")
