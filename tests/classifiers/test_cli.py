"""`pitstop classify` end to end, as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEV = REPO / "tests" / "fixtures" / "classifiers" / "dev.jsonl"


def _pitstop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pitstop.cli.entry", *args], capture_output=True, text=True, cwd=REPO, timeout=120)


def test_json_one_object_per_path_in_order_with_errors(tmp_path: Path) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("x\nNVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE\n")
    b.write_text("all fine\n")
    proc = _pitstop("classify", str(a), str(tmp_path / "missing.log"), str(b), "--exit-code", "0", "--json")
    assert proc.returncode == 1
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["path"] for r in rows] == [str(a), str(tmp_path / "missing.log"), str(b)]
    assert rows[0]["cause"] == "gpu_memory" and rows[0]["signature"] == "xid-48"
    assert rows[0]["evidence"][0]["line"] == 2 and 0 < rows[0]["confidence"] <= 1
    assert "error" in rows[1] and "no such file" in rows[1]["error"]
    assert rows[2]["cause"] == "success"


def test_state_and_kernel_log_options(tmp_path: Path) -> None:
    log, kern = tmp_path / "job.log", tmp_path / "kern.log"
    log.write_text("step 1\n")
    kern.write_text("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    proc = _pitstop("classify", str(log), "--state", "TIMEOUT", "--json")
    assert json.loads(proc.stdout)["cause"] == "time_limit"
    proc = _pitstop("classify", str(log), "--state", "FAILED", "--kernel-log", str(kern), "--json")
    assert json.loads(proc.stdout)["cause"] == "gpu_hardware"


def test_eval_prints_table_and_json() -> None:
    proc = _pitstop("classify", "--eval", str(DEV))
    assert proc.returncode == 0 and "macro-F1" in proc.stdout and "confusion" in proc.stdout
    report = json.loads(_pitstop("classify", "--eval", str(DEV), "--json").stdout)
    assert report["total"] == 134 and report["macro_f1"] >= 0.96
    assert report["unambiguous"]["total"] == 134 - sum('"ambiguous": true' in line for line in DEV.read_text().splitlines())


def test_eval_confusion_matrix_keeps_every_count_on_an_80_column_terminal() -> None:
    """16 causes as named columns do not fit 80 columns, and rich then drops the last ones silently."""
    env = {**os.environ, "COLUMNS": "80"}
    # Rules only: they leave a dev row unknown, which the learned model's guess would fill.
    proc = subprocess.run([sys.executable, "-m", "pitstop.cli.entry", "classify", "--eval", str(DEV), "--no-learned"],
                          capture_output=True, text=True, cwd=REPO, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(_pitstop("classify", "--eval", str(DEV), "--no-learned", "--json").stdout)
    causes = [s["cause"] for s in report["per_cause"]]
    assert "unknown" in causes  # the widest case: a 16th column
    printed = {}
    for line in proc.stdout.splitlines():
        cells = line.split()
        if len(cells) == len(causes) + 2 and cells[1] in causes:
            printed[cells[1]] = [0 if c == "." else int(c) for c in cells[2:]]
    for truth in causes:
        row = report["confusion"].get(truth, {})
        assert printed[truth] == [row.get(p, 0) for p in causes], truth
    for m in report["mistakes"]:
        assert f"wrong: {m['id']}: {m['label']} -> {m['predicted']}" in proc.stdout


# --- paths that are not readable log files (issue 13, item 6) ---------------------------------

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"


def _pitstop_bounded(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """A hang (e.g. open() waiting on a FIFO) fails the test at `timeout` instead of blocking CI."""
    return subprocess.run([sys.executable, "-m", "pitstop.cli.entry", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=timeout)


def test_fifo_device_and_directory_are_errors_and_later_paths_are_still_classified(tmp_path: Path) -> None:
    first, last = tmp_path / "first.log", tmp_path / "last.log"
    first.write_text(XID79)
    last.write_text("x\nNVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE\n")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # nobody ever writes to it: open() for reading would wait forever
    paths = [first, fifo, Path("/dev/zero"), tmp_path, last]
    proc = _pitstop_bounded("classify", *map(str, paths), "--json")
    assert proc.returncode == 1, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["path"] for r in rows] == [str(p) for p in paths]
    assert rows[0]["signature"] == "xid-79" and rows[4]["signature"] == "xid-48"
    assert rows[1] == {"path": str(fifo), "error": f"cannot classify {fifo}: it is a FIFO (named pipe), not a regular file"}
    assert rows[2] == {"path": "/dev/zero", "error": "cannot classify /dev/zero: it is a character device, not a regular file"}
    assert set(rows[3]) == {"path", "error"} and "directory" in rows[3]["error"]


def test_human_output_names_the_unreadable_path_on_stderr(tmp_path: Path) -> None:
    good = tmp_path / "good.log"
    good.write_text(XID79)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    proc = _pitstop_bounded("classify", str(fifo), str(good))
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"{fifo}: error: cannot classify {fifo}: it is a FIFO (named pipe), not a regular file"
    assert proc.stdout.startswith(f"{good}: gpu_hardware (xid-79")


def test_a_file_that_fails_to_read_is_that_paths_error(tmp_path: Path) -> None:
    good = tmp_path / "good.log"
    good.write_text(XID79)
    unreadable = [Path("/proc/self/mem")]  # regular file whose read fails (EIO): open works, the scan not
    if os.geteuid() != 0:  # root reads anything: mode 000 only stops other users
        locked = tmp_path / "locked.log"
        locked.write_text(XID79)
        locked.chmod(0)
        unreadable.append(locked)
    if not unreadable[0].exists():
        unreadable.pop(0)
    if not unreadable:
        pytest.skip("no unreadable regular file available here")
    proc = _pitstop_bounded("classify", *map(str, unreadable), str(good), "--json")
    assert proc.returncode == 1
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    for path, row in zip(unreadable, rows):
        assert row["path"] == str(path) and row["error"].startswith(f"cannot classify {path}: ")
    assert rows[-1]["signature"] == "xid-79"


def test_unreadable_kernel_log_is_reported_once_and_the_paths_still_get_verdicts(tmp_path: Path) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(XID79)
    b.write_text("all fine\n")
    missing = tmp_path / "dmesg.txt"
    proc = _pitstop_bounded("classify", str(a), str(b), "--kernel-log", str(missing), "--exit-code", "0", "--json")
    assert proc.returncode == 1
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(rows) == 3 and rows[0]["path"] == str(missing)
    assert "no such file" in rows[0]["error"] and "--kernel-log" in rows[0]["error"]
    assert rows[1]["signature"] == "xid-79" and rows[2]["cause"] == "success"


def test_kernel_log_evidence_is_used_with_every_path(tmp_path: Path) -> None:
    a, b, kern = tmp_path / "a.log", tmp_path / "b.log", tmp_path / "kern.log"
    a.write_text("step 1\n")
    b.write_text("step 2\n")
    kern.write_text(XID79)
    proc = _pitstop_bounded("classify", str(a), str(b), "--state", "FAILED", "--kernel-log", str(kern), "--json")
    assert proc.returncode == 0
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["signature"] for r in rows] == ["xid-79", "xid-79"]
    assert all(r["evidence"][0]["source"] == "kernel" for r in rows)


def test_exit_codes_are_documented_and_kept(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text(XID79)
    assert _pitstop_bounded("classify", str(log)).returncode == 0
    assert _pitstop_bounded("classify").returncode == 2
    usage = _pitstop_bounded("classify", str(log), "--engine", "nope")
    assert usage.returncode == 2 and usage.stdout == "" and "unknown classifier engine" in usage.stderr
    help_text = _pitstop_bounded("classify", "--help").stdout
    for line in ("0  every path classified", "1  some path (or the kernel log) could not be read", "2  usage error"):
        assert line in help_text


def test_the_run_classifier_worker_does_not_hang_on_a_fifo(tmp_path: Path) -> None:
    """The worker behind `pitstop run` answers with an error stage instead of waiting on open()."""
    log, fifo = tmp_path / "stderr.log", tmp_path / "stdout.log"
    log.write_text(XID79)
    os.mkfifo(fifo)
    request = json.dumps({"paths": [str(log), str(fifo)], "facts": {"exit_code": 1}}) + "\n"
    proc = subprocess.run([sys.executable, "-m", "pitstop.cli.classify_worker"], input=request,
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["stage"] for r in replies] == ["facts", "error"] and proc.returncode == 1
    assert replies[1]["error"] == f"cannot classify {fifo}: it is a FIFO (named pipe), not a regular file"
