"""The disk spool: atomic, idempotent per event id, and bad files quarantined, never lost."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from pitstop.events.hook_env import job_ended_from_env
from pitstop.events.models import NodeAlarm
from pitstop.events.spool import Spool
from tests.triggers.conftest import read_env_fixture


def _event(job_id: str = "8"):
    env = {**read_env_fixture("epilog_ctld_exit3.env"), "SLURM_JOB_ID": job_id}
    return job_ended_from_env(env, "c").to_wire()


def test_write_then_read_back(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    event = _event()
    path = spool.write(event)
    assert path.parent == spool.pending and path.name.endswith(f"-{event.id}.json")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    [item] = list(spool.iter_pending())
    assert item.event == event
    assert list(spool.tmp.iterdir()) == []  # nothing left half-written


def test_same_event_twice_is_one_file(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    event = _event()
    spool.write(event)
    spool.write(event)
    assert len(spool.pending_paths()) == 1


def test_oldest_first(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    ids = [spool.write(_event(str(i))) and _event(str(i)).id for i in range(5)]
    assert [item.event.id for item in spool.iter_pending()] == ids


def test_corrupt_empty_huge_and_foreign_files_are_quarantined_not_deleted(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    good = spool.write(_event())
    spool.pending.mkdir(parents=True, exist_ok=True)
    (spool.pending / "0-empty.json").write_bytes(b"")
    (spool.pending / "0-garbage.json").write_bytes(b"\xff\xfe not json \x00")
    (spool.pending / "0-foreign.json").write_text('{"hello": "world"}')
    (spool.pending / "0-huge.json").write_bytes(b" " * (2 * 1024 * 1024))
    (spool.pending / "notes.txt").write_text("not an event file; left alone")
    items = list(spool.iter_pending())
    assert [i.path for i in items] == [good]
    bad = sorted(p.name for p in spool.bad.iterdir())
    assert "0-empty.json" in bad and "0-garbage.json" in bad and "0-foreign.json" in bad
    assert "0-huge.json" in bad and "0-foreign.json.why" in bad
    assert "not a Pitstop event" in (spool.bad / "0-foreign.json.why").read_text()
    assert (spool.pending / "notes.txt").exists()


def test_unwritable_spool_raises_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "spool"
    blocker.write_text("a file where the spool directory should be")
    try:
        Spool(blocker).write(_event())
    except OSError as exc:
        assert "cannot create the event spool" in str(exc)
    else:
        raise AssertionError("writing into a file-shaped spool must fail loudly")


def test_mark_sent_keeps_only_the_newest(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    for i in range(5):
        spool.write(_event(str(i)))
    for path in spool.pending_paths():
        spool.mark_sent(path, keep=3)
    assert spool.counts() == {"pending": 0, "sent": 3, "bad": 0}


def test_delivery_lock_is_exclusive(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    seen: list[bool] = []
    with spool.delivery_lock(wait=False) as first:
        t = threading.Thread(target=lambda: seen.append(_try_lock(spool)))
        t.start()
        t.join()
    assert first is True and seen == [False]
    assert _try_lock(spool) is True  # released


def _try_lock(spool: Spool) -> bool:
    # a second open file description, as a second process would have
    with spool.delivery_lock(wait=False) as got:
        return got


def test_node_alarm_ids(tmp_path: Path) -> None:
    a = NodeAlarm(cluster="c", node="gpu01", alarm="prolog_failed", summary="xid 79", job_id="8")
    b = NodeAlarm(cluster="c", node="gpu01", alarm="prolog_failed", summary="other", job_id="8")
    c = NodeAlarm(cluster="c", node="gpu02", alarm="prolog_failed", summary="xid 79", job_id="8")
    assert a.event_id == b.event_id != c.event_id
    path = Spool(tmp_path / "s").write(a.to_wire())
    assert os.path.getsize(path) > 0


def test_same_job_seen_twice_later_is_still_one_file(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    first = spool.write(_event())
    again = spool.write(_event())  # a second epilog run: new seen_at, same id
    assert again == first and len(spool.pending_paths()) == 1
