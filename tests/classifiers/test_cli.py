"""`pitstop classify` end to end, as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
    proc = subprocess.run([sys.executable, "-m", "pitstop.cli.entry", "classify", "--eval", str(DEV)],
                          capture_output=True, text=True, cwd=REPO, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(_pitstop("classify", "--eval", str(DEV), "--json").stdout)
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
