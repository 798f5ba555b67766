"""Incident labels in the real SQLite store: history kept, newest wins, bounded log snapshots."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pitstop.config import load_settings
from pitstop.models import Cause, Evidence, SchedulerFacts, Verdict
from pitstop.store import Store
from pitstop.store import labels
from pitstop.store import records as r
from pitstop.store.migrations import SCHEMA_VERSION

# srun's task exit line (Slurm srun(1)) and PyTorch's OOM message, as a job log ends.
TAIL = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
        "srun: error: gpu017: task 0: Exited with exit code 1\n")


def _store(home: Path) -> Store:
    return Store.from_settings(load_settings(home=home))


def _incident(store: Store, job: str = "42") -> int:
    verdict = Verdict(cause=Cause.SOFTWARE_BUG, signature="py-RuntimeError", confidence=0.6,
                      evidence=[Evidence(line=7, text="RuntimeError: NCCL error in: ../ProcessGroupNCCL.cpp:1207"),
                                Evidence(line=0, text="state FAILED", source="scheduler")])
    inc, _ = r.create_job_incident(store, cluster="dev", job_id=job, end_time=datetime.now(timezone.utc), verdict=verdict)
    return inc.id


def test_history_is_kept_and_the_newest_label_wins(isolated_home: Path, tmp_path: Path) -> None:
    store = _store(isolated_home)
    first, second = _incident(store, "1"), _incident(store, "2")
    log = tmp_path / "slurm-1.out"
    log.write_text("step 1 loss 2.3\n" + TAIL)
    excerpt, problems = labels.excerpt_logs([log])
    assert problems == []
    labels.record_label(store, labels.LabelInput(incident_id=first, cause=Cause.NCCL_TIMEOUT, by="alice",
                                                 excerpt=excerpt, facts=SchedulerFacts(state="FAILED", exit_code=1)))
    relabel = labels.record_label(store, labels.LabelInput(incident_id=first, cause=Cause.CUDA_OOM, by="bob",
                                                           note="the OOM came first"))
    # Re-labelled without new logs: the first snapshot (and facts) are carried over.
    assert relabel.excerpt == excerpt.text and relabel.facts == SchedulerFacts(state="FAILED", exit_code=1)
    fallback = labels.record_label(store, labels.LabelInput(incident_id=second, cause=Cause.NETWORK_FABRIC, by="carol"))
    assert fallback.excerpt == "RuntimeError: NCCL error in: ../ProcessGroupNCCL.cpp:1207"  # scheduler line left out
    assert fallback.sources[0].path == "(stored evidence lines)"
    history = labels.label_history(store, first)
    assert [(h.cause, h.labelled_by) for h in history] == [(Cause.NCCL_TIMEOUT, "alice"), (Cause.CUDA_OOM, "bob")]
    assert [(x.incident_id, x.cause) for x in labels.latest_labels(store)] == [
        (first, Cause.CUDA_OOM), (second, Cause.NETWORK_FABRIC)]
    assert history[0].predicted_cause == "software_bug" and history[0].predicted_signature == "py-RuntimeError"
    with pytest.raises(r.RecordError, match="no incident 999"):
        labels.record_label(store, labels.LabelInput(incident_id=999, cause=Cause.CUDA_OOM, by="alice"))
    store.dispose()


def test_schema_version_and_an_old_database_gets_the_table(isolated_home: Path) -> None:
    store = _store(isolated_home)
    store.dispose()
    db = isolated_home / "pitstop.db"
    with sqlite3.connect(db) as conn:  # a database made before labels existed
        conn.execute("DROP TABLE incident_labels")
        conn.execute("UPDATE pitstop_schema_version SET version = 1")
    store = _store(isolated_home)
    labels.record_label(store, labels.LabelInput(incident_id=_incident(store), cause=Cause.CUDA_OOM, by="alice"))
    store.dispose()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version FROM pitstop_schema_version").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("SELECT count(*) FROM incident_labels").fetchone() == (1,)


def test_excerpt_of_a_big_log_is_bounded_and_keeps_what_decides(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    with open(log, "w") as out:
        out.write("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")  # line 1
        for i in range(400_000):  # ~10 MB of progress lines between the fault and the end
            out.write(f"iteration {i:>7} | lm loss 2.31 | grad norm 0.91\n")
        out.write("x" * 100_000 + "\n")  # one absurd line
        out.write(TAIL)
    marked = {1: "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
              200_000: "iteration  199998 | lm loss nan | grad norm nan"}
    lines, note = labels.read_excerpt(log, marked)
    text = "\n".join(lines)
    assert len(text.encode()) <= labels.MAX_EXCERPT_BYTES
    assert lines[0].startswith("NVRM: Xid") and lines[-1].startswith("srun: error: gpu017")
    assert "CUDA out of memory" in text and "lm loss nan" in text
    assert all(len(line) <= labels.MAX_LINE_CHARS for line in lines)
    assert note.truncated and note.size == log.stat().st_size
    # The order is the file's: the marked middle line sits between the head and the tail.
    assert text.index("Xid") < text.index("lm loss nan") < text.index("CUDA out of memory")


def test_excerpt_problems_are_named_not_raised(tmp_path: Path) -> None:
    small = tmp_path / "small.log"
    small.write_text(TAIL)
    excerpt, problems = labels.excerpt_logs([tmp_path / "gone.log", tmp_path, small])
    assert excerpt.text == TAIL.rstrip("\n") and [s.path for s in excerpt.sources] == [str(small)]
    assert len(problems) == 2 and "gone.log" in problems[0]
    assert labels.kernel_excerpt(tmp_path / "gone.log") is None
