"""Exit codes pass through exactly, as a shell reports them; a command that never started still
leaves a run directory that says why."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.wrapper.conftest import PY

SEGFAULT = "import os, signal; print('about to crash', flush=True); os.kill(os.getpid(), signal.SIGSEGV)"
SIGKILL_SELF = "import os, signal; print('before kill', flush=True); os.kill(os.getpid(), signal.SIGKILL)"


@pytest.mark.parametrize(
    ("cmd", "expected"),
    [
        (["true"], 0),
        (["false"], 1),
        (["sh", "-c", "exit 3"], 3),
        ([PY, "-c", SIGKILL_SELF], 137),
        ([PY, "-c", SEGFAULT], 139),
        (["definitely-not-a-command-pitstop"], 127),
    ],
    ids=["0", "1", "3", "sigkill-137", "segfault-139", "not-found-127"],
)
def test_exit_code_passes_through(run_pitstop, cmd, expected) -> None:
    done = run_pitstop(cmd)
    assert done.returncode == expected, done.stderr.decode(errors="replace")
    result = done.json("result.json")
    assert result["exit_code"] == expected
    metadata = done.json("metadata.json")
    assert metadata["command"] == cmd
    assert metadata["cwd"] == os.getcwd()
    assert metadata["host"] == os.uname().nodename


def test_signal_death_is_recorded_with_the_signal(run_pitstop) -> None:
    done = run_pitstop([PY, "-c", SIGKILL_SELF])
    assert done.returncode == 137
    result = done.json("result.json")
    assert result["signal"] == 9 and result["status"] == "failed"
    # what the child printed before it was killed is on disk
    assert (done.run_dir / "stdout.log").read_bytes() == b"before kill\n"
    assert "O| before kill" in done.text("combined.log")


def test_not_found_leaves_run_dir_with_error(run_pitstop) -> None:
    done = run_pitstop(["no-such-binary-xyz", "--flag"])
    assert done.returncode == 127
    assert "no-such-binary-xyz: command not found" in done.text("error.txt")
    assert b"command not found" in done.stderr
    result = done.json("result.json")
    assert result["status"] == "not_started"
    assert result["cause"] == "environment" and result["signature"] == "command-not-found"


def test_not_executable_is_126(run_pitstop, tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    done = run_pitstop([str(script)])
    assert done.returncode == 126
    assert "permission denied" in done.text("error.txt")
    assert done.json("result.json")["signature"] == "command-not-executable"


def test_metadata_is_written_before_the_child_starts(run_pitstop, tmp_path: Path) -> None:
    # The child itself reads metadata.json from the run directory: it must already be complete.
    probe = (
        "import json, os, glob; d = sorted(glob.glob(os.environ['PITSTOP_HOME'] + '/runs/*'))[-1];"
        "m = json.load(open(d + '/metadata.json')); print('META', m['id'], m['slurm_job_id'])"
    )
    done = run_pitstop([PY, "-c", probe], env={"SLURM_JOB_ID": "4242"})
    assert done.returncode == 0, done.stderr
    run_id = done.run_dir.name
    assert done.stdout.decode().strip() == f"META {run_id} 4242"
    assert json.loads((done.run_dir / "metadata.json").read_text())["slurm"]["SLURM_JOB_ID"] == "4242"


def test_usage_error_without_command(run_pitstop) -> None:
    done = run_pitstop([])
    assert done.returncode == 2
    assert b"no command given" in done.stderr
