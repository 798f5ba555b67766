"""Required mounts: mountinfo parsing (fixtures: tests/fixtures/node/mounts/README.md) and a real
blocking probe: a FIFO whose open() blocks like a stat on a dead NFS server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pitstop.config import RequiredMount, load_settings
from pitstop.models import CheckStatus
from pitstop.node import mounts
from pitstop.node.check import CheckContext, run_checks
from pitstop.node.mounts import ProbeResult
from tests.conftest import REPO_ROOT

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "mounts"
HOME, LUSTRE = RequiredMount(path=Path("/home"), fstype="nfs4"), RequiredMount(path=Path("/lustre"), fstype="lustre")
FAST = ProbeResult(True, 0.004)


def test_mountinfo_parser() -> None:
    entries = mounts.parse_mountinfo((FIX / "mountinfo_good.txt").read_text())
    by_point = {e.mount_point: e for e in entries}
    assert by_point["/lustre"].fstype == "lustre" and by_point["/lustre"].source == "10.2.0.5@o2ib:10.2.0.6@o2ib:/scratch"
    assert by_point["/mnt/shared data"].source == "fs02:/export/shared data"  # \040 is a space
    assert by_point["/home"].options == "rw,relatime"


def test_present_and_answering_is_ok() -> None:
    result = mounts.process_mounts([HOME, LUSTRE], (FIX / "mountinfo_good.txt").read_text(), [FAST, FAST], 3)
    assert result.status is CheckStatus.OK and result.summary == "2 required mount(s) answering"


def test_missing_wrong_type_stale_and_broken_mounts_fail() -> None:
    missing = mounts.process_mounts([HOME, LUSTRE], (FIX / "mountinfo_lustre_missing.txt").read_text(), [FAST, None], 3)
    assert missing.status is CheckStatus.FAIL and missing.summary == "/lustre is not mounted"
    wrong = mounts.process_mounts([HOME], (FIX / "mountinfo_home_wrong_type.txt").read_text(), [FAST], 3)
    assert wrong.status is CheckStatus.FAIL and "mounted as ext4 from /dev/nvme0n1p3, not nfs4" in wrong.summary
    stale = mounts.process_mounts([HOME, LUSTRE], (FIX / "mountinfo_good.txt").read_text(), [FAST, None], 3)
    assert stale.status is CheckStatus.FAIL
    assert stale.summary == "/lustre (lustre from 10.2.0.5@o2ib:10.2.0.6@o2ib:/scratch) did not answer within 3 s: stale or hung mount"
    broken = mounts.process_mounts([HOME], (FIX / "mountinfo_good.txt").read_text(),
                                   [ProbeResult(False, 0.01, "Stale file handle (errno 116)")], 3)
    assert broken.status is CheckStatus.FAIL and "Stale file handle" in broken.summary


def test_nothing_configured_or_unreadable_mountinfo() -> None:
    assert mounts.process_mounts([], "", None, 3).status is CheckStatus.UNAVAILABLE
    corrupt = mounts.process_mounts([HOME], "27 1 259:2 / / rw,relatime no-separator-here\n", [None], 3)
    assert corrupt.status is CheckStatus.WARN and "mountinfo line 1" in corrupt.summary


@pytest.fixture()
def blocking_mount(tmp_path: Path):
    """A 'mount' at tmp_path/mnt whose probe file is a FIFO nobody writes: reading it blocks."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    fifo = mnt / "probe"
    os.mkfifo(fifo)
    proc = tmp_path / "proc" / "self"
    proc.mkdir(parents=True)
    (proc / "mountinfo").write_text(
        (FIX / "mountinfo_good.txt").read_text()
        + f"600 27 0:70 / {mnt} rw,relatime shared:400 - nfs4 deadserver:/export/data rw,vers=4.2,hard\n")
    yield mnt, fifo, tmp_path / "proc"
    try:  # release the abandoned probe thread: a writer that opens and closes gives it EOF
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # ENXIO: no reader left
        pass


def test_a_blocking_mount_fails_within_the_timeout(blocking_mount) -> None:
    mnt, fifo, procfs = blocking_mount
    settings = load_settings(node_check={
        "procfs_root": str(procfs), "mount_timeout_s": 0.5,
        "required_mounts": [{"path": str(mnt), "fstype": "nfs4", "probe_file": str(fifo)}, {"path": "/"}],
    })
    started = time.monotonic()
    report = run_checks(["mounts"], CheckContext(settings))
    elapsed = time.monotonic() - started
    [result] = report.checks
    assert result.status is CheckStatus.FAIL and elapsed < 2.0, (elapsed, result)
    assert result.summary == f"{mnt} (nfs4 from deadserver:/export/data) did not answer within 0.5 s: stale or hung mount"
    assert [m["status"] for m in result.details["mounts"]] == ["FAIL", "OK"]  # the real / still answers
    assert any(t.name.startswith("pitstop-mount-probe-") for t in threading.enumerate())  # abandoned, still blocked


def test_the_cli_does_not_hang_on_a_blocking_mount(blocking_mount) -> None:
    mnt, fifo, procfs = blocking_mount
    env = {**os.environ, "PITSTOP_NODE_CHECK__PROCFS_ROOT": str(procfs), "PITSTOP_NODE_CHECK__MOUNT_TIMEOUT_S": "0.5",
           "PITSTOP_NODE_CHECK__REQUIRED_MOUNTS": json.dumps([{"path": str(mnt), "probe_file": str(fifo)}])}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", "from pitstop.cli.entry import main; main()", "node-check", "--json",
                           "--checks", "mounts"], capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert "did not answer within 0.5 s" in proc.stdout and time.monotonic() - started < 10


def test_real_root_mount_answers() -> None:
    settings = load_settings(node_check={"required_mounts": [{"path": "/"}]})
    report = run_checks(["mounts"], CheckContext(settings))
    assert report.checks[0].status is CheckStatus.OK, report.checks[0]
    assert report.checks[0].details["mounts"][0]["elapsed_ms"] < 3000


def test_runs_on_this_machine() -> None:
    report = run_checks(["mounts"], CheckContext(load_settings()))
    assert report.checks[0].status in (CheckStatus.OK, CheckStatus.UNAVAILABLE), report.checks[0]


def test_unreadable_mount_table_is_unavailable(tmp_path: Path) -> None:
    settings = load_settings(node_check={"procfs_root": str(tmp_path / "no-proc"), "required_mounts": [{"path": "/"}]})
    result = mounts.check(CheckContext(settings))
    assert result.status is CheckStatus.UNAVAILABLE and "mountinfo cannot be read" in result.summary
